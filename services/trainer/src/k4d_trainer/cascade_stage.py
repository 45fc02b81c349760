"""The recipe's cascade stage: train the sample refiner (k4d_model.cascade) on rollouts of
the transformer just trained, after the transformer stage (`cascade` section).

1. Rollouts. Each rank samples its share of `cascade.data_uri`'s episodes with the trained
   transformer through the generator's own pipeline (`Kinema4DPipeline.decoded_sample`: the
   model's sampler settings, the decoded sample before any output option; episode i with
   seed `cascade.sample_seed` + i; in fp32 on a CPU, as the generator's torch backend
   samples there, else under the model's precision), and stores each as
   RUN/cascade_rollouts/<episode>.npz: a resumed run samples only the episodes still
   missing. These episodes are not the training data: on its own
   training episodes the transformer samples better than on anything a user gives it, and
   a refiner trained there would trust the sample too much.
2. Training, data-parallel over ranks, each rank on its own share of the rollouts. A step
   takes `batch_size` random (episode, frame t >= 1) pairs per process; the loss, over the
   pixels off the robot in frame t and frame 0 (kinematics draws those), is

       colour   the squared (`colour_loss: squared`) or absolute (`l1`) error of frame t's
                colour change from frame 0 ([-1, 1] scale); a weighted mean, `changed_weight`
                where the ground truth changed from frame 0 (k4d_trainer.latents.changed_pixels,
                the transformer's rule), 1 elsewhere
       points   `point_weight` x the L1 error of its point change (POINT_GAIN x normalised
                units), where the ground truth's depth is known in both frames
       flow     with `warp`: `flow_weight` x the L1 error of its flow (FLOW_SCALE pixels)
                against the ground truth's (k4d_trainer.object_flow: from the episodes'
                object ids and poses), off the robot where it is valid and, with
                `flow_pixels: objects`, an object is seen in frame t; logged beside
                `flow_still`, the same error of no flow at all
       gate     with `gate`: `gate_weight` x the binary cross-entropy of the change gate's
                logit against `changed` (the ground truth changed from frame 0), off the
                robot; logged beside `gate_acc`, the share of those pixels it classifies
                right

   The stage saves its state every `checkpoint_every` steps and continues from it.

Rank 0 writes the network to RUN/cascade/ with a COMMITTED marker last; a resumed run loads
it instead of training again. All three (rollouts, stage state, network) belong to one
transformer step and one number of samples per rollout, recorded in RUN/cascade_source.json:
a run resumed with more transformer steps (`--steps`) samples and trains again rather than
keep a refiner of the old weights' samples; with only another `cascade.samples` it keeps the
stored rollouts (extending them with the samples they lack) and trains again.
"""

from __future__ import annotations

import io
import json
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from k4d.errors import InvalidArgument, NotFound
from k4d.tool import ToolTrack
from k4d_model.cascade import (
    FLOW_SCALE,
    POINT_GAIN,
    CascadeConfig,
    SampleRefiner,
    load_cascade,
    sample_inputs,
    save_cascade,
)
from k4d_model.conditions import PointmapNormalization
from k4d_model.pipeline import Kinema4DPipeline, sample_seed
from k4d_model.results import RobotCondition

from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.config import CascadeSection, DataSection
from k4d_trainer.data import open_source, select_episodes
from k4d_trainer.latents import changed_pixels, scene_depth
from k4d_trainer.model import sampling_components
from k4d_trainer.object_flow import episode_flow
from k4d_trainer.parallel import DistInfo, barrier
from k4d_trainer.progress import TrainedDenoiser
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
from k4d_trainer.tool_condition import episode_camera_pose, episode_tool

FOLDER = "cascade"
ROLLOUTS_FOLDER = "cascade_rollouts"
STAGE_FOLDER = "cascade_stage"
# {"transformer_step": N, "samples": K}: what the three folders came from
SOURCE = "cascade_source.json"
SEED_OFFSET = 3  # the stage's seed from the run's (the refiner's networks take 0-2)


class CascadeExample(NamedTuple):
    """Frames t >= 1 of one rollout (or a batch of frames, stacked), tensors (N, C, H, W):
    x the network's inputs (k4d_model.cascade.sample_inputs), colour and points its targets,
    off_robot where the colour loss counts, known where the point loss counts, changed where
    the ground truth changed from frame 0 off the robot (what `changed_weight` weighs); with
    `warp`, flow the ground truth's backward flow (FLOW_SCALE pixels) and flow_known where it
    counts (None without)."""

    x: torch.Tensor
    colour: torch.Tensor
    points: torch.Tensor
    off_robot: torch.Tensor
    known: torch.Tensor
    changed: torch.Tensor
    flow: torch.Tensor | None = None
    flow_known: torch.Tensor | None = None

    def take(self, index) -> CascadeExample:
        """The frames `index` (an int, slice or index tensor) of every part."""
        return CascadeExample(*(None if part is None else part[index] for part in self))

    @staticmethod
    def gather(examples: list[CascadeExample], picks: list[tuple[int, int]]) -> CascadeExample:
        """A batch: frame t of examples[i] for each (i, t) of `picks`, stacked (the parts
        the examples lack stay None)."""
        return CascadeExample(*(
            None if getattr(examples[0], name) is None else
            torch.stack([getattr(examples[i], name)[t] for i, t in picks])
            for name in CascadeExample._fields))


def stored_samples(arrays: dict[str, np.ndarray]) -> int:
    """How many samples a stored rollout holds (one is stored unstacked)."""
    return arrays["rgb"].shape[0] if arrays["rgb"].ndim == 5 else 1


def rollout_inputs(clip: dict[str, np.ndarray]
                   ) -> tuple[np.ndarray, RobotCondition, PointmapNormalization]:
    """What a user's rollout of a clip is given: frame 0, the robot condition and the
    normalisation from the robot's points (nothing else is known)."""
    mask = np.asarray(clip["robot_mask"], bool)
    robot = RobotCondition(np.ascontiguousarray(clip["robot_rgb"]),
                           clip["robot_pointmap"].astype(np.float32), mask)
    return (np.ascontiguousarray(clip["rgb"][0]), robot,
            PointmapNormalization.from_points(robot.pointmap, mask))


def rollout_arrays(pipe: Kinema4DPipeline, clip: dict[str, np.ndarray], seed: int,
                   samples: int = 1, stored: dict[str, np.ndarray] | None = None,
                   tool: ToolTrack | None = None, T_cam_from_base: np.ndarray | None = None
                   ) -> dict[str, np.ndarray]:
    """One episode's rollout and its targets, as stored (float16 where it is a float):
    the image, what the refiner reads of the decoded sample (Kinema4DPipeline.refiner_input:
    the sample, or a tracks model's frames; rgb, pointmap, stacked (samples, T, H, W, 3)
    when the network reads several), its colour's reference frame (sample_reference: the
    decoder's static frame, or frame 0 for a tracks model), the ground truth's colour and
    depth-known points, the robot mask and the normalisation's scale. `stored`: this
    episode's rollout with fewer samples, kept: only the samples it lacks are drawn (sample
    k's noise depends on the seed and k alone, k4d_model.pipeline.sample_seed). `tool`:
    the episode's, for a transformer that reads it (k4d_trainer.tool_condition), with its
    camera's pose (`T_cam_from_base`) for one that reads the tool's position."""
    image, robot, norm = rollout_inputs(clip)
    mask = robot.mask
    have = 0 if stored is None else stored_samples(stored)
    rgb, pointmap = ([], []) if stored is None else (
        list(stored["rgb"].reshape(have, *stored["rgb"].shape[-4:])),
        list(stored["pointmap"].reshape(have, *stored["pointmap"].shape[-4:])))
    for k in range(have, samples):
        one_rgb, one_points = pipe.refiner_input(
            image, robot, *pipe.decoded_sample(image, robot, norm, seed=sample_seed(seed, k),
                                               tool=tool, T_cam_from_base=T_cam_from_base),
            norm)
        rgb.append(one_rgb.astype(np.float16))
        pointmap.append(one_points.astype(np.float16))
    rgb, pointmap = (rgb[0], pointmap[0]) if samples == 1 else (np.stack(rgb), np.stack(pointmap))
    if stored is not None:
        return {**stored, "rgb": rgb, "pointmap": pointmap}
    known = scene_depth(clip) > 0
    return {"image": image, "rgb": rgb, "pointmap": pointmap,
            "reference": pipe.sample_reference(image)[0].astype(np.float16),
            "target_rgb": np.ascontiguousarray(clip["rgb"]),
            "target_points": np.where(known[..., None], clip["pointmap"], 0.0).astype(np.float32),
            "known": known, "robot_mask": mask, "scale": np.float32(norm.scale)}


def rollout_example(arrays: dict[str, np.ndarray], context: int = 0, samples: int = 1
                    ) -> CascadeExample:
    """The training frames t >= 1 of a stored rollout (`context`, `samples`: CascadeConfig's;
    a rollout stored with more samples gives its first `samples`); with `flow` and
    `flow_valid` among the arrays (object_flow.backward_flow's, added by the stage), the
    flow targets too."""
    rgb, pointmap = arrays["rgb"], arrays["pointmap"]
    if rgb.ndim == 5:
        rgb, pointmap = rgb[:samples], pointmap[:samples]
    rgb = rgb.astype(np.float32)
    reference = np.broadcast_to(arrays["reference"].astype(np.float32), rgb.shape[-4:])
    x = sample_inputs(arrays["image"], rgb, reference, pointmap.astype(np.float32), context,
                      samples)
    image = arrays["image"].astype(np.float32)
    colour = (arrays["target_rgb"][1:].astype(np.float32) - image[None]) / 127.5
    target = arrays["target_points"]
    points = (target[1:] - target[:1]) * (POINT_GAIN / float(arrays["scale"]))
    mask, known = arrays["robot_mask"], arrays["known"]
    off_robot = ~mask[1:] & ~mask[:1]
    # the transformer's change rule, on the targets (unknown points are stored as zeros)
    changed = changed_pixels({"rgb": arrays["target_rgb"], "pointmap": target,
                              "robot_mask": mask})[1:]

    def planes(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2), np.float32))

    flow = flow_known = None
    if "flow" in arrays:
        flow = planes(arrays["flow"][1:] / FLOW_SCALE)
        flow_known = torch.from_numpy((off_robot & arrays["flow_valid"][1:])[:, None]
                                      .astype(np.float32))
    return CascadeExample(x, planes(colour), planes(points),
                          torch.from_numpy(off_robot[:, None].astype(np.float32)),
                          torch.from_numpy((off_robot & known[1:] & known[:1])[:, None]
                                           .astype(np.float32)),
                          torch.from_numpy(changed[:, None].astype(np.float32)),
                          flow, flow_known)


def cascade_loss(output: torch.Tensor, batch: CascadeExample, section: CascadeSection
                 ) -> tuple[torch.Tensor, dict]:
    """The stage's loss (module docstring) and its parts."""
    known = batch.known
    weight = batch.off_robot * (1.0 + (section.changed_weight - 1.0) * batch.changed)
    error = output[:, :3] - batch.colour
    error = error.abs() if section.colour_loss == "l1" else error ** 2
    colour = (weight * error).sum() / (3.0 * weight.sum().clamp_min(1.0))
    points = ((known * (output[:, 3:6] - batch.points).abs()).sum()
              / (3.0 * known.sum().clamp_min(1.0)))
    parts = {"colour": float(colour.detach()), "points": float(points.detach())}
    loss = colour + section.point_weight * points
    if section.warp:
        flow_known = batch.flow_known
        flow = ((flow_known * (output[:, 6:8] - batch.flow).abs()).sum()
                / (2.0 * flow_known.sum().clamp_min(1.0)))
        parts["flow"] = float(flow.detach())
        # the same error of no flow at all: the mark the flow has to beat
        parts["flow_still"] = float((flow_known * batch.flow.abs()).sum()
                                    / (2.0 * flow_known.sum().clamp_min(1.0)))
        loss = loss + section.flow_weight * flow
    if section.gate:
        logit, off_robot = output[:, -1:], batch.off_robot
        cross_entropy = F.binary_cross_entropy_with_logits(logit, batch.changed, reduction="none")
        gate = (off_robot * cross_entropy).sum() / off_robot.sum().clamp_min(1.0)
        parts["gate"] = float(gate.detach())
        parts["gate_acc"] = float((off_robot * ((logit > 0).float() == batch.changed).float())
                                  .sum() / off_robot.sum().clamp_min(1.0))
        loss = loss + section.gate_weight * gate
    return loss, parts


def with_flow(arrays: dict[str, np.ndarray], dataset, episode_id: str, clip: ClipSpec,
              section: CascadeSection) -> dict[str, np.ndarray]:
    """A stored rollout's arrays, with the episode's flow targets added when `section.warp`
    (not stored with the rollout: they are the episode's, whichever transformer sampled it)."""
    if not section.warp:
        return arrays
    flow, valid = episode_flow(dataset.open(episode_id), clip, section.flow_pixels)
    return {**arrays, "flow": flow, "flow_valid": valid}


def sampling_share(episode_ids: list[str], info: DistInfo, every_rank: bool) -> list[str]:
    """The episodes this rank samples: its share when every rank holds the whole
    transformer, else (sharded weights, gathered on rank 0 alone) all of them on rank 0."""
    if every_rank:
        return episode_ids[info.rank::info.world_size]
    return list(episode_ids) if info.is_main else []


def read_rollout(run: RunDir, episode_id: str) -> dict[str, np.ndarray]:
    """A stored rollout's arrays."""
    with np.load(io.BytesIO(run.read_bytes(f"{ROLLOUTS_FOLDER}/{episode_id}.npz"))) as data:
        return dict(data)


def sample_rollouts(pipe: Kinema4DPipeline, dataset, episode_ids: list[str], mine: list[str],
                    clip: ClipSpec, run: RunDir, info: DistInfo, seed: int, log=print,
                    samples: int = 1) -> None:
    """The rollouts of `mine` not stored yet, or stored with fewer than `samples` samples
    (extended); episode i of `episode_ids` samples with seed `seed` + i, whichever rank
    samples it."""
    stored = {e for e in mine if run.exists(f"{ROLLOUTS_FOLDER}/{e}.npz")}
    short = {e for e in stored if stored_samples(read_rollout(run, e)) < samples}
    todo = [e for e in mine if e not in stored or e in short]
    if len(todo) < len(mine) or short:
        log(f"cascade: {len(stored)} of this rank's {len(mine)} rollouts stored by an earlier "
            f"attempt ({len(short)} with fewer than {samples} samples: extended)")
    index = {episode_id: i for i, episode_id in enumerate(episode_ids)}
    for done, episode_id in enumerate(todo, 1):
        episode = dataset.open(episode_id)
        arrays = rollout_arrays(pipe, read_clip(episode, clip), seed + index[episode_id],
                                samples,
                                read_rollout(run, episode_id) if episode_id in short else None,
                                episode_tool(episode, clip) if pipe.reads_tool else None,
                                episode_camera_pose(episode) if pipe.reads_tool else None)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        run.write_bytes(f"{ROLLOUTS_FOLDER}/{episode_id}.npz", buffer.getvalue())
        if done % 16 == 0 or done == len(todo):
            log(f"cascade: rank {info.rank} sampled {done}/{len(todo)} rollouts")


def train_cascade(examples: list[CascadeExample], section: CascadeSection, info: DistInfo,
                  seed: int, run: RunDir | None = None, log=print
                  ) -> tuple[SampleRefiner, list[float]]:
    """A sample refiner trained on this rank's rollouts (data-parallel over ranks), and its
    loss per step; resumable with a run and `section.checkpoint_every`."""
    torch.manual_seed(seed)  # identical initial replicas on every rank
    model = SampleRefiner(CascadeConfig(channels=tuple(section.channels),
                                        residual=section.residual,
                                        context=section.context,
                                        samples=section.samples,
                                        warp=section.warp,
                                        matching=section.matching,
                                        gate=section.gate)).to(info.device)
    model.train()
    generator = torch.Generator().manual_seed(seed * 37 + info.rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=section.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(section.warmup_steps, section.steps, section.lr_schedule))
    saved = None
    if run is not None and section.checkpoint_every:
        saved = load_stage_state(run, STAGE_FOLDER, model, generator, info, log,
                                 "cascade stage")
    start = saved["step"] if saved else 0
    losses: list[float] = list(saved["losses"]) if saved else []
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
    frames = [(i, t) for i, e in enumerate(examples) for t in range(e.x.shape[0])]
    log_every = section.log_every or max(1, section.steps // 5)
    recent: list[dict] = []
    for step in range(start, section.steps):
        picks = [frames[p] for p in
                 torch.randint(0, len(frames), (section.batch_size,), generator=generator).tolist()]
        batch = CascadeExample(*(None if part is None else part.to(info.device)
                                 for part in CascadeExample.gather(examples, picks)))
        loss, parts = cascade_loss(model(batch.x), batch, section)
        losses.append(side_step(loss, model, optimizer, scheduler, info))
        recent.append(parts)
        done = step + 1
        recent = log_side_steps(log, "cascade", done, section.steps, losses, recent, scheduler,
                                log_every, digits=5)
        save_stage_state_when_due(run, section.checkpoint_every, done, section.steps,
                                  STAGE_FOLDER, losses, model, optimizer, scheduler, generator,
                                  info)
    return model.cpu().eval(), losses


def save_run_cascade(network: SampleRefiner, run: RunDir) -> None:
    """Rank 0: RUN_URI/cascade/ (k4d_model.cascade's layout), the COMMITTED marker last."""
    commit_network(run, FOLDER, save_cascade, network)


def load_run_cascade(run: RunDir) -> SampleRefiner | None:
    """The committed sample refiner of this run, or None."""
    return load_committed(run, FOLDER, load_cascade)


def cascade_source(run: RunDir) -> dict | None:
    """What this run's rollouts, stage state and sample refiner were made from
    ({"transformer_step": N, "samples": K}); None when unrecorded (a run of a version before
    the record, or none yet)."""
    if not run.exists(SOURCE):
        return None
    return {"samples": 1, **json.loads(run.read_bytes(SOURCE))}


def cascade_source_step(run: RunDir) -> int | None:
    """The transformer step of cascade_source, or None."""
    return (cascade_source(run) or {}).get("transformer_step")


def claim_cascade_source(run: RunDir, transformer_step: int, info: DistInfo, log=print,
                         samples: int = 1) -> None:
    """Rank 0 removes what the stage made from another (or an unrecorded) transformer step
    and records this one; with only another number of samples, the rollouts stay (their
    samples are kept and extended or cut) and the network and its saved state go. Every
    rank waits for it."""
    made_from = cascade_source(run)
    wanted = {"transformer_step": transformer_step, "samples": samples}
    if info.is_main and made_from != wanted:
        same_step = made_from is not None and made_from["transformer_step"] == transformer_step
        stale = [folder for folder in (FOLDER, STAGE_FOLDER, ROLLOUTS_FOLDER)
                 if run.exists(folder) and not (same_step and folder == ROLLOUTS_FOLDER)]
        if stale:
            was = ("(unrecorded)" if made_from is None else
                   f"transformer step {made_from['transformer_step']}, "
                   f"{made_from['samples']} sample(s)")
            log(f"cascade: {', '.join(stale)} came from {was}; now transformer step "
                f"{transformer_step}, {samples} sample(s): "
                + ("training again on the stored rollouts" if same_step
                   else "sampling and training again"))
        for folder in stale:
            run.remove(folder)
        run.write_bytes(SOURCE, json.dumps(wanted).encode())
    barrier(info)


def cascade_episodes(section: CascadeSection, clip: ClipSpec, max_upscale: float,
                     env_config=None) -> tuple[object, list[str]]:
    """The dataset of `cascade.data_uri` and its episodes (at most `max_episodes`);
    InvalidArgument naming the field when it cannot be read or holds none."""
    try:
        dataset = open_source(DataSection(uri=section.data_uri), env_config)
        ids = select_episodes(dataset, DataSection(uri=section.data_uri,
                                                   max_episodes=section.max_episodes or None,
                                                   max_upscale=max_upscale), clip)
    except (InvalidArgument, NotFound) as exc:
        raise InvalidArgument.for_field("cascade.data_uri", f"{section.data_uri}: {exc}") from None
    if not ids:
        raise InvalidArgument.for_field("cascade.data_uri", f"{section.data_uri} holds no episodes")
    return dataset, ids


def cascade_stage(components, transformer: torch.nn.Module | None, transformer_step: int,
                  clip: ClipSpec, section: CascadeSection, info: DistInfo, run: RunDir,
                  seed: int, compute_dtype: torch.dtype | None, max_upscale: float = 2.0,
                  env_config=None, log=print) -> list[float]:
    """Load the committed sample refiner of this run or sample the rollouts and train one;
    sets components.cascade. `transformer`: the trained weights as a module this rank can
    sample with, None on a rank that cannot (k4d_trainer.progress.sampling_transformer);
    `transformer_step`: their step (what the stage made from another step is redone)."""
    claim_cascade_source(run, transformer_step, info, log, section.samples)
    saved = load_run_cascade(run)
    if saved is not None:
        components.cascade = saved
        log("cascade: loaded the committed sample refiner of this run")
        return []
    dataset, episode_ids = cascade_episodes(section, clip, max_upscale, env_config)
    sampling = sampling_components(components, transformer)
    if transformer is not None:
        was_training = transformer.training
        transformer.eval()
        try:
            sampling_dtype = None if info.device.type == "cpu" else compute_dtype
            pipe = Kinema4DPipeline(sampling, TrainedDenoiser(transformer, sampling_dtype,
                                                              info.device),
                                    device=str(info.device), model_id="trainer-cascade")
            mine = sampling_share(episode_ids, info, every_rank=info.dp_shard <= 1)
            sample_rollouts(pipe, dataset, episode_ids, mine, clip, run, info,
                            section.sample_seed, log, section.samples)
        finally:
            transformer.train(was_training)
            if info.device.type != "cpu":
                components.vae.cpu()
                components.image_encoder.cpu()
    barrier(info)
    examples = [rollout_example(with_flow(read_rollout(run, episode_id), dataset, episode_id,
                                          clip, section), section.context, section.samples)
                for episode_id in episode_ids[info.rank::info.world_size]]
    log(f"cascade: training on {len(episode_ids)} rollouts of {section.data_uri}")
    with torch.random.fork_rng(devices=[]):
        network, losses = train_cascade(examples, section, info, seed + SEED_OFFSET, run, log)
    if info.is_main:
        save_run_cascade(network, run)
        run.remove(STAGE_FOLDER)  # the committed network supersedes it
    barrier(info)
    components.cascade = network
    return losses
