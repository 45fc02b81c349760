"""The recipe's refiner stage: train the change refiner (k4d_model.refiner) on the run's
clips, data-parallel over ranks, beside the transformer (it needs neither the VAE nor the
transformer, so a run trains it once, before the latent cache).

Each step takes `batch_size` random (episode, frame t >= 1) pairs per process. The loss,
over the pixels off the robot (in frame t and frame 0, as the evaluator's regions):

    colour   `colour_weight` x the MSE of the predicted change of colour from frame 0, the
             changed pixels (`k4d_trainer.latents.changed_pixels`, the evaluator's rule)
             weighted `changed_weight`, the others 1
    mask     `mask_weight` x the BCE of the change logit against those changed pixels
    depth    with `depth_weight` > 0 (a refiner with a depth head): that weight x the MSE of
             the predicted change of depth from frame 0 over the changed pixels whose depth
             is known in both frames (k4d_model.refiner's DEPTH_GAIN x depth / robot scale)
    first    with `first_depth_weight` > 0 (a first-frame depth head): that weight x the MSE
             of log(frame 0's depth / robot scale) over the pixels whose depth is known;
             with `first_depth_frames: every` (a first-depth network alone), frame 0 is
             any frame s < t of the clip, drawn uniformly below t (a quarter of the
             examples are the clip's own frame 0), with the robot's frames from s on
    planes   with `plane_weight` > 0 (scene planes, k4d_model.refiner; episodes need their
             camera's pose): that weight x (the cross-entropy of the plane logits against
             the plane each pixel of frame 0 lies on, off the robot, + COORDINATE_GAIN x the
             L1 error of the predicted base-frame coordinate of that plane, on its pixels).
             A pixel lies on the plane `axis = c` when that coordinate of its base-frame point
             varies by < PLANE_TOLERANCE_M over its 3x3 neighbourhood. The camera inputs are
             zeroed for a share `camera_dropout` of the examples (no plane loss there), so
             the network also serves rollouts without a camera pose.
    objects  with `object_logit_weight` > 0 (an object network, no other term): that weight
             x the BCE of the object logit against the object pixels (object_ids > 0, off
             the robot), an object pixel weighted `object_pos_weight`. Its examples are
             frames t >= 0 each as a given image with its robot (RefinerClip.given_example):
             the network reads the image it is given, and every frame of a clip is one.

A section's `geometry` and `objects` networks are trained after it, each by its own section
(seeds + 1 and + 2), and stored inside the refiner (RefinerConfig.geometry, .objects).

Rank 0 writes the trained refiner to RUN_URI/refiner/ with a COMMITTED marker last; a
resumed run loads it instead of training it again.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from k4d.errors import InvalidArgument
from k4d_model.refiner import (
    DEPTH_GAIN,
    PLANE_CHANNELS,
    BaseRays,
    ChangeRefiner,
    RefinerConfig,
    depth_scale,
    load_refiner,
    refiner_inputs,
    save_refiner,
    unknown_camera,
    with_geometry,
    with_objects,
)
from k4d_model.results import RobotCondition

from k4d_trainer.clips import OBJECT_IDS, ClipSpec, read_clip
from k4d_trainer.config import RefinerSection
from k4d_trainer.latents import changed_pixels, scene_depth
from k4d_trainer.parallel import DistInfo, autocast, barrier
from k4d_trainer.runs import RunDir
from k4d_trainer.schedule import lr_lambda
from k4d_trainer.stage_state import (
    commit_network,
    load_committed,
    load_stage_state,
    log_side_steps,
    save_stage_state_when_due,
    side_step,
)

FOLDER = "refiner"
STAGE_FOLDER = "refiner_stage"
GEOMETRY_STAGE_FOLDER = "geometry_refiner_stage"
OBJECTS_STAGE_FOLDER = "objects_refiner_stage"


class RefinerNetwork(NamedTuple):
    """One network of the stage: the recipe field of its section (what a bad input names),
    its seed's offset from the stage's, the run folder of its partial state, its log name."""
    field: str
    seed_offset: int
    stage_folder: str
    name: str


NETWORKS = {"colour": RefinerNetwork("refiner", 0, STAGE_FOLDER, "refiner"),
            "geometry": RefinerNetwork("refiner.geometry", 1, GEOMETRY_STAGE_FOLDER,
                                       "geometry refiner"),
            "objects": RefinerNetwork("refiner.objects", 2, OBJECTS_STAGE_FOLDER,
                                      "object refiner")}
PLANE_TOLERANCE_M = 0.003  # a plane's coordinate varies less than this over 3x3 pixels
Z_PLANE = 3  # planes_of's label of a plane z = const
COORDINATE_GAIN = 10.0  # 1 cm of a plane's coordinate weighs as 0.1 of cross-entropy


class RefinerExample(NamedTuple):
    """One training frame t (or a batch of them, stacked: a leading N), tensors (C, H, W):

    x            refiner_inputs for frame t (INPUT_CHANNELS)
    delta        colour change from frame 0, on [-1, 1]'s scale (3)
    changed      the evaluator's changed pixels (1)
    off_robot    off the robot in frames t and 0 (1)
    depth        depth change from frame 0 in the depth head's unit (1)
    known        depth known in frames t and 0 (1)
    first_depth  log of frame 0's depth over the robot's scale (1)
    first_known  depth known in frame 0 (1)
    plane        the plane frame 0's pixel lies on: 0 none, 1-3 x, y, z = const (1, int64)
    base_points  frame 0's points in the robot base frame, metres (3)
    plane_known  the plane targets hold: off the robot, depth known, camera given (1)
    objects      frame 0's object pixels, off the robot (1; zeros for a clip without
                 object ids; None: not given)"""

    x: torch.Tensor
    delta: torch.Tensor
    changed: torch.Tensor
    off_robot: torch.Tensor
    depth: torch.Tensor
    known: torch.Tensor
    first_depth: torch.Tensor
    first_known: torch.Tensor
    plane: torch.Tensor
    base_points: torch.Tensor
    plane_known: torch.Tensor
    objects: torch.Tensor | None = None


def channel(a: np.ndarray) -> torch.Tensor:
    """(1, H, W) float32: one plane of an example."""
    return torch.from_numpy(np.ascontiguousarray(a, np.float32)[None])


class RefinerClip:
    """What the stage keeps of one episode: the arrays the inputs and targets need.
    With `T_cam_from_base` (4, 4) the examples carry the camera inputs and plane targets
    of a scene-planes network (k4d_model.refiner)."""

    def __init__(self, clip: dict[str, np.ndarray], T_cam_from_base: np.ndarray | None = None,
                 object_planes: bool = False):
        self.rgb = np.ascontiguousarray(clip["rgb"])
        self.robot = RobotCondition(np.ascontiguousarray(clip["robot_rgb"]),
                                    clip["robot_pointmap"].astype(np.float32),
                                    np.asarray(clip["robot_mask"], bool))
        self.changed = changed_pixels(clip)
        self.depth = scene_depth(clip)  # known where > 0 (the targets' masks)
        self.scale = depth_scale(self.robot)
        _, H, W = self.depth.shape
        self.camera = None
        self.plane = np.zeros((H, W), np.int64)
        self.base_points = np.zeros((H, W, 3), np.float32)
        self.plane_known = np.zeros((H, W), bool)
        self.object_frames = np.zeros(self.depth.shape, bool)
        if OBJECT_IDS in clip:
            self.object_frames = (np.asarray(clip[OBJECT_IDS]) > 0) & ~self.robot.mask
        rays = BaseRays.from_robot(self.robot, T_cam_from_base)
        if rays is not None:
            self.camera = rays.channels()
            self.base_points = rays.to_base(clip["pointmap"][0]).astype(np.float32)
            self.plane_known = (self.depth[0] > 0) & ~self.robot.mask[0]
            self.plane = planes_of(self.base_points, self.plane_known)
            if object_planes:  # a height map on the objects (RefinerSection.object_planes)
                self.plane[self.objects & self.plane_known] = Z_PLANE

    @property
    def frames(self) -> int:
        return int(self.rgb.shape[0])

    @property
    def objects(self) -> np.ndarray:
        """(H, W) bool: frame 0's object pixels, off the robot (zeros without object ids)."""
        return self.object_frames[0]

    def example(self, t: int, camera: bool | None = None) -> RefinerExample:
        """The training example of frame t; `camera`: with the camera inputs (the clip's,
        zeros when False or when the clip has none), None: without them (a network
        without scene planes)."""
        with_camera = bool(camera) and self.camera is not None
        inputs = None if camera is None else (self.camera if with_camera else
                                              unknown_camera(*self.depth.shape[1:]))
        x = refiner_inputs(self.rgb[0], self.robot, [t], inputs)[0]
        now, first = (self.rgb[i].astype(np.float32) / 127.5 for i in (t, 0))
        mask = self.robot.mask
        first_known = self.depth[0] > 0
        depth_known = (self.depth[t] > 0) & first_known
        depth = np.where(depth_known, (self.depth[t] - self.depth[0]) * (DEPTH_GAIN / self.scale),
                         0.0)
        first_depth = np.log(np.where(first_known, self.depth[0], self.scale) / self.scale)
        return RefinerExample(x, torch.from_numpy((now - first).transpose(2, 0, 1).copy()),
                              channel(self.changed[t]), channel(~mask[t] & ~mask[0]), channel(depth),
                              channel(depth_known), channel(first_depth), channel(first_known),
                              torch.from_numpy(self.plane[None].copy()),
                              torch.from_numpy(self.base_points.transpose(2, 0, 1).copy()),
                              channel(self.plane_known & with_camera), channel(self.objects))

    def first_depth_example(self, start: int, t: int) -> RefinerExample:
        """Frame `start` as the given frame 0 of a rollout of the clip's robot from `start` on,
        at that rollout's frame t - start (start < t): a first-depth network's example
        (RefinerSection.first_depth_frames), its target frame `start`'s log depth over the
        robot's mean depth there. The change targets (colour, mask, depth) are zero: such a
        network has no other term."""
        robot = RobotCondition(self.robot.rgb[start:], self.robot.pointmap[start:],
                               self.robot.mask[start:])
        return first_depth_example(self.rgb[start], self.depth[start],
                                   self.object_frames[start], robot, t - start)

    def given_example(self, t: int) -> RefinerExample:
        """Frame t as a given image with its robot (an object network's example): the inputs
        of a clip whose frame 0 it is, and its object pixels; the other targets are zero."""
        robot = RobotCondition(self.robot.rgb[t:t + 1], self.robot.pointmap[t:t + 1],
                               self.robot.mask[t:t + 1])
        x = refiner_inputs(self.rgb[t], robot, [0])[0]
        _, H, W = self.depth.shape
        zero = torch.zeros(1, H, W)
        return RefinerExample(x, torch.zeros(3, H, W), zero, torch.from_numpy(
            (~self.robot.mask[t]).astype(np.float32)[None]), zero, zero, zero, zero,
            torch.zeros(1, H, W, dtype=torch.int64), torch.zeros(3, H, W), zero,
            torch.from_numpy(self.object_frames[t].astype(np.float32)[None]))


class FirstFrameClip:
    """What a first-depth network alone on each clip's frame 0 (RefinerSection.first_frame_only)
    keeps of one episode: frame 0's image, depth and objects, and the robot's render, mask
    and depth, about a third of a RefinerClip, so that thousands of episodes fit in memory.
    Its examples are RefinerClip.first_depth_example(0, t)'s (the same tensors)."""

    def __init__(self, clip: dict[str, np.ndarray]):
        mask = np.asarray(clip["robot_mask"], bool)
        # copies: a view would hold the whole clip's array alive
        self.image = np.array(clip["rgb"][0])
        self.depth = scene_depth({"pointmap": clip["pointmap"][:1]})[0].copy()  # frame 0 alone
        self.objects = np.zeros(mask.shape[1:], bool)
        if OBJECT_IDS in clip:
            self.objects = (np.asarray(clip[OBJECT_IDS][0]) > 0) & ~mask[0]
        self.robot_rgb = np.ascontiguousarray(clip["robot_rgb"])
        # the inputs read the robot's depth alone (refiner_inputs, depth_scale)
        self.robot_depth = np.ascontiguousarray(clip["robot_pointmap"][..., 2], np.float32)
        self.robot_mask = mask

    @property
    def frames(self) -> int:
        return int(self.robot_mask.shape[0])

    def first_depth_example(self, start: int, t: int) -> RefinerExample:
        if start != 0:
            raise ValueError(f"a FirstFrameClip keeps frame 0 alone, not frame {start}")
        pointmap = np.zeros(self.robot_depth.shape + (3,), np.float32)
        pointmap[..., 2] = self.robot_depth
        robot = RobotCondition(self.robot_rgb, pointmap, self.robot_mask)
        return first_depth_example(self.image, self.depth, self.objects, robot, t)


def first_depth_example(image: np.ndarray, depth: np.ndarray, objects: np.ndarray,
                        robot: RobotCondition, t: int) -> RefinerExample:
    """A first-depth network's example: `image` (H, W, 3) uint8 as the given frame 0 of the
    robot's rollout `robot`, at its frame t; the target log(depth / the robot's mean depth
    in frame 0) where depth (H, W) is known (> 0), frame 0's `objects` (H, W) bool weighing
    it. The change targets (colour, mask, depth) are zero."""
    x = refiner_inputs(image, robot, [t])[0]
    scale = depth_scale(robot)
    known = depth > 0
    first_depth = np.log(np.where(known, depth, scale) / scale)
    H, W = depth.shape
    zero = torch.zeros(1, H, W)
    return RefinerExample(x, torch.zeros(3, H, W), zero,
                          channel(~robot.mask[t] & ~robot.mask[0]), zero, zero,
                          channel(first_depth), channel(known),
                          torch.zeros(1, H, W, dtype=torch.int64), torch.zeros(3, H, W),
                          zero, channel(objects))


IMAGE_CHANNELS = 6  # refiner_inputs' given image and robot render: resized bilinearly


def zoomed(batch: RefinerExample, max_zoom: float, generator: torch.Generator
           ) -> RefinerExample:
    """Each example of a batch through a narrower field of view (RefinerSection.max_zoom): a
    window of 1/z of its height and width, z uniform in [1, max_zoom], at a random place,
    resized back to the frame. The image and the robot render are resized bilinearly; masks,
    depths, the frame index and every target by nearest neighbour, so a depth is never a
    blend of two surfaces' and a mask stays 0 or 1."""
    N, _, H, W = batch.x.shape
    pieces: list[list[torch.Tensor]] = [[] for _ in batch]
    for n in range(N):
        zoom = 1.0 + (max_zoom - 1.0) * float(torch.rand((), generator=generator))
        h, w = max(1, round(H / zoom)), max(1, round(W / zoom))
        top = int(torch.randint(0, H - h + 1, (1,), generator=generator))
        left = int(torch.randint(0, W - w + 1, (1,), generator=generator))
        for k, part in enumerate(batch):
            window = part[n:n + 1, :, top:top + h, left:left + w]
            nearest = F.interpolate(window.float(), size=(H, W), mode="nearest").to(part.dtype)
            if k == 0:  # x: its image channels bilinear
                smooth = F.interpolate(window[:, :IMAGE_CHANNELS], size=(H, W),
                                       mode="bilinear", align_corners=False)
                nearest = torch.cat([smooth, nearest[:, IMAGE_CHANNELS:]], 1)
            pieces[k].append(nearest)
    return RefinerExample(*(torch.cat(p) for p in pieces))


def planes_of(base_points: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(H, W) int64: the plane of the base frame each known pixel lies on (0: none, 1-3:
    x, y, z = const; z before x before y where two hold): the coordinate varies < PLANE_TOLERANCE_M over the pixel's
    3x3 neighbourhood, all of it known. base_points (H, W, 3) metres, known (H, W) bool."""
    padded = np.pad(np.where(known[..., None], base_points, np.nan), ((1, 1), (1, 1), (0, 0)),
                    constant_values=np.nan)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(0, 1))
    spread = windows.max(axis=(-2, -1)) - windows.min(axis=(-2, -1))  # NaN: an unknown one
    with np.errstate(invalid="ignore"):
        flat = (spread < PLANE_TOLERANCE_M) & known[..., None]  # (H, W, 3)
    plane = np.zeros(known.shape, np.int64)
    for axis in (1, 0, 2):  # z last wins: a floor's edge against a wall is the floor
        plane[flat[..., axis]] = axis + 1
    return plane


def refiner_loss(output: torch.Tensor, batch: RefinerExample, section: RefinerSection
                 ) -> tuple[torch.Tensor, dict]:
    """The stage's loss (module docstring) and its parts, for (N, config.outputs, H, W)
    outputs of a refiner built from `section` (refiner_config)."""
    off_robot, changed = batch.off_robot, batch.changed
    weight = off_robot * (1.0 + section.changed_weight * changed)
    colour = ((weight * (output[:, :3] - batch.delta) ** 2).sum()
              / (3.0 * weight.sum().clamp_min(1.0)))
    bce = F.binary_cross_entropy_with_logits(
        output[:, 3:4], changed, reduction="none",
        pos_weight=torch.tensor(section.mask_pos_weight, device=output.device))
    mask = (off_robot * bce).sum() / off_robot.sum().clamp_min(1.0)
    loss = section.colour_weight * colour + section.mask_weight * mask
    # the parts a log line reports: the terms that weigh (a first-depth network's change
    # targets are zeros, its colour and mask errors against them mean nothing)
    parts = {name: float(term.detach()) for name, term, weight in
             (("colour", colour, section.colour_weight), ("mask", mask, section.mask_weight))
             if weight > 0}
    if section.depth_weight > 0:
        where = off_robot * changed * batch.known
        error = (where * (output[:, 4:5] - batch.depth) ** 2).sum() / where.sum().clamp_min(1.0)
        loss = loss + section.depth_weight * error
        parts["depth"] = float(error.detach())
    config = refiner_config(section)
    objects = (1.0 if batch.objects is None or section.object_weight == 0
               else 1.0 + section.object_weight * batch.objects)
    if section.first_depth_weight > 0:
        where = batch.first_known * objects
        first = output[:, config.first_index:config.first_index + 1]
        error = ((where * (first - batch.first_depth) ** 2).sum()
                 / where.sum().clamp_min(1.0))
        loss = loss + section.first_depth_weight * error
        parts["first_depth"] = float(error.detach())
    if section.plane_weight > 0:
        planes = output[:, config.planes_index:config.planes_index + PLANE_CHANNELS]
        where = (batch.plane_known * objects)[:, 0]
        count = where.sum().clamp_min(1.0)
        entropy = (where * F.cross_entropy(planes[:, 3:], batch.plane[:, 0], reduction="none")
                   ).sum() / count
        on = F.one_hot(batch.plane[:, 0], 4)[..., 1:].permute(0, 3, 1, 2) * where[:, None]
        coordinate = (on * (planes[:, :3] - batch.base_points).abs()).sum() / on.sum().clamp_min(1)
        loss = loss + section.plane_weight * (entropy + COORDINATE_GAIN * coordinate)
        parts.update(planes=float(entropy.detach()), coordinate_m=float(coordinate.detach()))
    if section.object_logit_weight > 0:
        logit = output[:, config.object_index:config.object_index + 1]
        bce = F.binary_cross_entropy_with_logits(
            logit, batch.objects, reduction="none",
            pos_weight=torch.tensor(section.object_pos_weight, device=output.device))
        error = (off_robot * bce).sum() / off_robot.sum().clamp_min(1.0)
        loss = loss + section.object_logit_weight * error
        parts["objects"] = float(error.detach())
    return loss, parts


def refiner_config(section: RefinerSection) -> RefinerConfig:
    """The network the section trains: a head per loss term with a weight > 0."""
    return RefinerConfig(channels=tuple(section.channels), depth=section.depth_weight > 0,
                         first_depth=section.first_depth_weight > 0,
                         scene_planes=section.plane_weight > 0,
                         object_logit=section.object_logit_weight > 0)


def train_refiner(dataset, episode_ids: list[str], clip: ClipSpec, section: RefinerSection,
                  info: DistInfo, seed: int, run: RunDir | None = None, log=print,
                  network: RefinerNetwork = NETWORKS["colour"], compute_dtype: torch.dtype | None = None
                  ) -> tuple[ChangeRefiner, list[float]]:
    """A refiner trained on the episodes (data-parallel over ranks), and its loss per step.
    With a run and `section.checkpoint_every`, the stage saves its state in
    RUN/network.stage_folder
    every so many steps and at the end, and continues from the newest one when started
    again (a network that finished is not trained again when the next one is interrupted).
    compute_dtype: the autocast dtype of the forward pass (None: fp32; the loss is fp32)."""
    planes = section.plane_weight > 0
    needs_ids = {"object_weight": section.object_weight > 0,
                 "object_planes": section.object_planes,
                 "object_logit_weight": section.object_logit_weight > 0}
    extra = (OBJECT_IDS,) if any(needs_ids.values()) else ()
    first_frame_only = section.first_frame_only
    clips: list[RefinerClip] | list[FirstFrameClip] = []
    for eid in episode_ids[info.rank::info.world_size]:
        episode = dataset.open(eid)
        if extra and OBJECT_IDS not in episode:
            key = next(name for name, needed in needs_ids.items() if needed)
            raise InvalidArgument.for_field(
                f"{network.field}.{key}", f"episode {eid!r} has no {OBJECT_IDS} array to find its "
                                   "objects by")
        arrays = read_clip(episode, clip, extra)
        if first_frame_only:
            clips.append(FirstFrameClip(arrays))
            continue
        pose = episode.meta.camera_at(0).T_cam_from_base if planes else None
        clips.append(RefinerClip(arrays, pose, section.object_planes))
    torch.manual_seed(seed)  # identical initial replicas on every rank
    model = ChangeRefiner(refiner_config(section)).to(info.device).train()
    generator = torch.Generator().manual_seed(seed * 37 + info.rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=section.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(section.warmup_steps, section.steps, section.lr_schedule))
    saved = None
    if run is not None and section.checkpoint_every:
        saved = load_stage_state(run, network.stage_folder, model, generator, info, log,
                                 f"{network.name} stage")
    start = saved["step"] if saved else 0
    losses: list[float] = list(saved["losses"]) if saved else []
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
    log_every = section.log_every or max(1, section.steps // 5)
    given = section.object_logit_weight > 0  # an object network: frames as given images
    every_start = section.first_depth_frames == "every"
    recent: list[dict] = []
    for step in range(start, section.steps):
        picks = torch.randint(0, len(clips), (section.batch_size,), generator=generator)
        examples = []
        for i in picks.tolist():
            t = int(torch.randint(0 if given else 1, clips[i].frames, (1,), generator=generator))
            if given:
                examples.append(clips[i].given_example(t))
                continue
            if every_start:  # frame `start` as the given image, frame t of its rollout
                start = int(torch.randint(0, t, (1,), generator=generator))
                examples.append(clips[i].first_depth_example(start, t))
                continue
            if first_frame_only:  # the weighted parts of example(t)'s, less memory held
                examples.append(clips[i].first_depth_example(0, t))
                continue
            camera = None
            if planes:
                camera = bool(torch.rand((), generator=generator) >= section.camera_dropout)
            examples.append(clips[i].example(t, camera))
        batch = RefinerExample(*(torch.stack(part).to(info.device)
                                 for part in zip(*examples, strict=True)))
        if section.max_zoom > 1.0:
            batch = zoomed(batch, section.max_zoom, generator)
        with autocast(compute_dtype, info.device):
            output = model(batch.x)
        loss, parts = refiner_loss(output.float(), batch, section)
        losses.append(side_step(loss, model, optimizer, scheduler, info))
        recent.append(parts)
        done = step + 1
        recent = log_side_steps(log, network.name, done, section.steps, losses, recent,
                                scheduler, log_every)
        save_stage_state_when_due(run, section.checkpoint_every, done, section.steps,
                                  network.stage_folder, losses, model, optimizer, scheduler,
                                  generator, info)
    return model.cpu().eval(), losses


def save_run_refiner(refiner: ChangeRefiner, run: RunDir) -> None:
    """Rank 0: RUN_URI/refiner/ (k4d_model.refiner's layout) with the COMMITTED marker last
    (a refiner committed before, now with its object network, is uncommitted first)."""
    commit_network(run, FOLDER, save_refiner, refiner)


def load_run_refiner(run: RunDir) -> ChangeRefiner | None:
    """The committed refiner of this run, or None."""
    return load_committed(run, FOLDER, load_refiner)


def refiner_episodes(uri: str, episode_ids: list[str]) -> tuple[object, list[str]]:
    """The refiner's own dataset (`refiner.data_uri`) and the run's episodes in it, in the
    run's order; InvalidArgument when it holds none of them."""
    from k4d.episodes import open_dataset

    dataset = open_dataset(uri)
    present = set(dataset.episode_ids)
    ids = [eid for eid in episode_ids if eid in present]
    if not ids:
        raise InvalidArgument.for_field(
            "refiner.data_uri", f"{uri} holds none of the run's {len(episode_ids)} episodes "
                                "(generate it with data.uri's seed and episode count)")
    return dataset, ids


def first_episodes(section: RefinerSection, dataset, network: RefinerNetwork
                   ) -> tuple[object, list[str]]:
    """A section's own episodes (`max_episodes`): the first N of `data_uri`'s dataset, or of
    the run's; InvalidArgument when it holds fewer."""
    if section.data_uri:
        from k4d.episodes import open_dataset

        dataset = open_dataset(section.data_uri)
    ids = list(dataset.episode_ids)[:section.max_episodes]
    if len(ids) < section.max_episodes:
        raise InvalidArgument.for_field(
            f"{network.field}.max_episodes", f"{section.data_uri or 'the run dataset'} holds "
            f"{len(ids)} complete episodes, fewer than {section.max_episodes}")
    return dataset, ids


def refiner_stage(components, dataset, episode_ids, clip: ClipSpec, section: RefinerSection,
                  info: DistInfo, run: RunDir, seed: int, log=print,
                  compute_dtype: torch.dtype | None = None) -> list[float]:
    """Load the committed refiner of this run or train one (and its geometry and object
    networks, with `section.geometry` and `section.objects`); sets components.refiner. A
    committed refiner without the object network the section asks for gets it now (a run
    made before the section had one continues)."""
    wants_objects = section.objects is not None and section.objects.steps > 0
    saved = load_run_refiner(run)
    if saved is not None and (saved.objects is not None or not wants_objects):
        components.refiner = saved
        log("refiner: loaded the committed refiner of this run")
        return []
    losses: list[float] = []
    # The stage seeds its own replicas; the run's random stream after it stays the same
    # whether the refiner was trained now or loaded from an earlier attempt.
    with torch.random.fork_rng(devices=[]):
        if saved is not None:
            refiner = saved
            log("refiner: loaded the committed refiner of this run; training its object network")
        else:
            refiner, losses = _train_network(dataset, episode_ids, clip, section, info, seed,
                                             run, log, NETWORKS["colour"], compute_dtype)
            if section.geometry is not None and section.geometry.steps:
                geometry, more = _train_network(dataset, episode_ids, clip, section.geometry,
                                                info, seed, run, log, NETWORKS["geometry"],
                                                compute_dtype)
                refiner, losses = with_geometry(refiner, geometry), losses + more
        if wants_objects:
            objects, more = _train_network(dataset, episode_ids, clip, section.objects, info,
                                           seed, run, log, NETWORKS["objects"], compute_dtype)
            refiner, losses = with_objects(refiner, objects), losses + more
    if info.is_main:
        save_run_refiner(refiner, run)
        for network in NETWORKS.values():
            run.remove(network.stage_folder)  # the committed refiner supersedes them
    barrier(info)
    components.refiner = refiner
    return losses


def _train_network(dataset, episode_ids, clip, section, info, stage_seed, run, log,
                   network: RefinerNetwork, compute_dtype):
    compute_dtype = network_dtype(section, compute_dtype)
    if section.max_episodes is not None:
        dataset, episode_ids = first_episodes(section, dataset, network)
        log(f"{network.name}: the first {len(episode_ids)} episodes of "
            f"{section.data_uri or 'the run dataset'}")
    elif section.data_uri:
        dataset, episode_ids = refiner_episodes(section.data_uri, episode_ids)
        log(f"{network.name}: {len(episode_ids)} of the run's episodes from {section.data_uri}")
    return train_refiner(dataset, episode_ids, clip, section, info,
                         stage_seed + network.seed_offset, run, log, network=network,
                         compute_dtype=compute_dtype)


def network_dtype(section: RefinerSection, model_dtype: torch.dtype | None
                  ) -> torch.dtype | None:
    """The autocast dtype one network trains in: `section.precision` when it names one,
    else the model's stage dtype (None: fp32)."""
    return {"fp32": None, "bf16": torch.bfloat16}.get(section.precision, model_dtype)
