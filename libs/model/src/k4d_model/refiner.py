"""The change refiner: a small pixel-space network that predicts, for every generated frame,
where the scene differs from the given first frame and by how much colour (issue 21).

The transformer works on latents 8x smaller than the image, so an object a few pixels wide
is one latent cell and the robot's shadow a smudge; what the world does near the robot is
lost in decoding. The refiner sees the frame at full resolution: the given image and the
robot condition (its render, mask and depth now, in frame 0, in the frame before, and
where it has been so far), and outputs per pixel

    delta   (3)  frame t's colour minus frame 0's, on the [-1, 1] scale of the image
    logit   (1)  whether the pixel changed (the evaluator's `changed` rule, k4d_tabletop.scene_change)
    depth   (1)  with `RefinerConfig.depth`: frame t's depth minus frame 0's where the pixel
                 changed, DEPTH_GAIN x metres over the robot's mean depth in frame 0 (the
                 inputs' depth scale: the network sees no metric scale, only the robot's)
    first   (1)  with `RefinerConfig.first_depth`: the log of frame 0's scene depth over that
                 same scale (a depth estimate of the given image, anchored by the robot's
                 known depth; every frame t predicts it, the mean over frames is used)
    planes  (7)  with `RefinerConfig.scene_planes`: frame 0's surfaces as planes of the robot
                 base frame (x = c, y = c or z = c: a table top, a floor, a wall), the world
                 coordinate c per axis (3, metres) and which one the pixel lies on (4
                 logits: none, x, y, z). The depth of a pixel on a plane is where its camera
                 ray meets it (exact for a flat surface, ADR 017); elsewhere `first`.
                 Such a network also reads the camera's pose (BaseRays.channels).
    object  (1)  with `RefinerConfig.object_logit`: whether the given image's pixel shows an
                 object (the data engine's object ids >= 1), read once, from frame 0's inputs
                 (the robot's frame 0 only: it learns from every frame of a training clip
                 as an image given with its robot). A third network beside the colour one
                 (`RefinerConfig.objects`) finds frame 0's objects (RefinedChange.
                 object_probability); no output option reads it today.

Trained by `k4d train` (the recipe's `refiner` section, k4d_trainer.refiner_stage) on the same
clips as the transformer; used by the pipeline when the model's `refiner` option is set
(`k4d_model.options`). Stored in the model directory as refiner/config.json +
refiner/model.safetensors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from k4d.errors import InvalidArgument
from safetensors.torch import load_file, save_file
from torch import nn

from k4d_model.results import RobotCondition

FOLDER = "refiner"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INPUT_CHANNELS = 13  # see refiner_inputs
CAMERA_CHANNELS = 7  # see BaseRays.channels
OUTPUT_CHANNELS = 4  # colour change (3) + change logit (1), + 1 with a depth head
PLANE_CHANNELS = 7  # world coordinate per axis (3) + plane logits: none, x, y, z (4)
PLANE_HORIZONTAL = 3  # RefinedChange.first_plane of a pixel put on a plane z = const
# A plane's depth further than this factor from the direct estimate is taken for a
# misclassified pixel (a ray nearly parallel to the plane) and the direct estimate is kept
PLANE_DEPTH_RATIO = 2.0
DEPTH_GAIN = 10.0  # a lifted object moves ~5 % of the camera distance: keep the target near 1


@dataclass(frozen=True)
class RefinerConfig:
    """The network's shape: a U-Net with one level per entry of `channels` (each but the
    last halves the resolution), two 3x3 convolutions per level."""

    channels: tuple[int, ...] = (24, 48, 96, 128)
    groups: int = 8
    depth: bool = False  # an output: the depth change of the changed pixels
    first_depth: bool = False  # an output: frame 0's depth
    # outputs: frame 0's planes (needs first_depth); inputs: the camera's pose
    scene_planes: bool = False
    object_logit: bool = False  # an output: whether frame 0's pixel shows an object
    # A second network of this class beside it for the depth outputs (and the change
    # probability that gates the points), so that geometry does not share the colour's
    # capacity (measured: one network with both drew colour worse, ADR 016)
    geometry: RefinerConfig | None = None
    # A third network of this class for the object logit (frame 0's objects, found by
    # learning rather than by colour: the `object_pixels` option)
    objects: RefinerConfig | None = None

    @property
    def outputs(self) -> int:
        return (OUTPUT_CHANNELS + int(self.depth) + int(self.first_depth)
                + PLANE_CHANNELS * int(self.scene_planes) + int(self.object_logit))

    @property
    def inputs(self) -> int:
        return INPUT_CHANNELS + CAMERA_CHANNELS * int(self.scene_planes)

    @property
    def first_index(self) -> int:
        """The output channel of frame 0's log depth (with first_depth)."""
        return OUTPUT_CHANNELS + int(self.depth)

    @property
    def planes_index(self) -> int:
        """The first of the PLANE_CHANNELS outputs (with scene_planes)."""
        return self.first_index + int(self.first_depth)

    @property
    def object_index(self) -> int:
        """The output channel of the object logit (with object_logit)."""
        return self.planes_index + PLANE_CHANNELS * int(self.scene_planes)

    def __post_init__(self):
        if not self.channels or any(int(c) <= 0 or int(c) % self.groups for c in self.channels):
            raise InvalidArgument.for_field("refiner.channels",
                                            f"must be positive multiples of {self.groups}")
        if self.scene_planes and not self.first_depth:
            raise InvalidArgument.for_field("refiner.scene_planes",
                                            "needs the first_depth head (the depth off planes)")

    @classmethod
    def from_dict(cls, config: dict) -> RefinerConfig:
        """The inverse of dataclasses.asdict (config.json)."""
        geometry, objects = config.get("geometry"), config.get("objects")
        return cls(channels=tuple(config["channels"]), groups=int(config.get("groups", 8)),
                   depth=bool(config.get("depth", False)),
                   first_depth=bool(config.get("first_depth", False)),
                   scene_planes=bool(config.get("scene_planes", False)),
                   object_logit=bool(config.get("object_logit", False)),
                   geometry=cls.from_dict(geometry) if geometry else None,
                   objects=cls.from_dict(objects) if objects else None)


def conv_block(cin: int, cout: int, groups: int) -> nn.Sequential:
    """Two 3x3 convolutions, each with a GroupNorm of `groups` groups (none with 0: the
    layers' indices, and so a checkpoint's keys, stay the same) and a SiLU."""
    def norm() -> nn.Module:
        return nn.GroupNorm(groups, cout) if groups else nn.Identity()

    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), norm(), nn.SiLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), norm(), nn.SiLU())


class UNet(nn.Module):
    """(N, inputs, H, W) -> (N, outputs, H, W); any H, W. One level per entry of `channels`
    (each but the last halves the resolution), two 3x3 convolutions per level, skips
    concatenated on the way up, a 1x1 head. The pixel-space networks of a model directory
    (this refiner, k4d_model.cascade's sample refiner) are this network."""

    def __init__(self, inputs: int, channels: tuple[int, ...], outputs: int, groups: int):
        super().__init__()
        self.down = nn.ModuleList()
        width = inputs
        for out in channels:
            self.down.append(conv_block(width, out, groups))
            width = out
        self.up = nn.ModuleList()
        for skip in reversed(channels[:-1]):
            self.up.append(conv_block(width + skip, skip, groups))
            width = skip
        self.head = nn.Conv2d(width, outputs, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for level, block in enumerate(self.down):
            x = block(x)
            if level < len(self.down) - 1:
                skips.append(x)
                x = F.avg_pool2d(x, 2, ceil_mode=True)
        for block in self.up:
            skip = skips.pop()
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], dim=1))
        return self.head(x)


class ChangeRefiner(UNet):
    """(N, INPUT_CHANNELS, H, W) -> (N, config.outputs, H, W); any H, W. The geometry and
    object networks, when there are, are called apart (predict_change)."""

    def __init__(self, config: RefinerConfig | None = None):
        config = config or RefinerConfig()
        super().__init__(config.inputs, config.channels, config.outputs, config.groups)
        self.config = config
        geometry = self.config.geometry
        self.geometry = ChangeRefiner(geometry) if geometry is not None else None
        objects = self.config.objects
        self.objects = ChangeRefiner(objects) if objects is not None else None

    @property
    def geometry_source(self) -> ChangeRefiner:
        """The network whose depth outputs and change probability move the points."""
        return self.geometry if self.geometry is not None else self


def refiner_inputs(image: np.ndarray, robot: RobotCondition, frames: list[int] | None = None,
                   camera: np.ndarray | None = None) -> torch.Tensor:
    """(len(frames), INPUT_CHANNELS (+ CAMERA_CHANNELS), H, W) float32 for frames t (default
    1..T-1):

        the given image (3, [-1, 1]); the robot render at t (3, [-1, 1]); the robot mask at
        t, at 0, where the robot has been up to t, and at t-1 (4); the robot's depth at t and
        at 0 over its mean depth in frame 0 (2: scale-free, 0 off the robot); t / (T-1) (1);
        then `camera` (BaseRays.channels) when given, the same for every frame.

    image (H, W, 3) uint8; robot: the condition (T, H, W, ...) in the image's size."""
    mask = np.asarray(robot.mask, bool)
    T = mask.shape[0]
    frames = list(range(1, T)) if frames is None else frames

    def depth(t: int) -> np.ndarray:  # only the frames asked for: training asks for one
        return np.where(mask[t], robot.pointmap[t, ..., 2], 0.0).astype(np.float32)

    first_depth = depth(0)
    scale = depth_scale(robot)
    first = np.asarray(image, np.float32).transpose(2, 0, 1) / 127.5 - 1.0
    out = []
    for t in frames:
        render = np.asarray(robot.rgb[t], np.float32).transpose(2, 0, 1) / 127.5 - 1.0
        planes = [mask[t], mask[0], mask[:t + 1].any(axis=0), mask[max(t - 1, 0)]]
        out.append(np.concatenate([
            first, render, np.stack(planes).astype(np.float32),
            depth(t)[None] / scale, first_depth[None] / scale,
            np.full((1,) + mask.shape[1:], t / max(T - 1, 1), np.float32),
            *([] if camera is None else [camera])]))
    return torch.from_numpy(np.stack(out).astype(np.float32))


@dataclass(frozen=True)
class BaseRays:
    """The camera's rays in the robot base frame: where frame 0's pixels look from.

    rays    (H, W, 3) float64, base frame, the camera-frame ray with z == 1 rotated (a point
            at depth d along it is centre + d * ray)
    T_base_from_cam  (4, 4) float64, the camera's pose in the base frame"""

    rays: np.ndarray
    T_base_from_cam: np.ndarray

    @property
    def centre(self) -> np.ndarray:
        """(3,) metres: the camera's centre in the base frame."""
        return self.T_base_from_cam[:3, 3]

    def to_base(self, p_cam: np.ndarray) -> np.ndarray:
        """Camera-frame points (..., 3) -> base-frame points (..., 3) float64."""
        return (np.asarray(p_cam, np.float64) @ self.T_base_from_cam[:3, :3].T
                + self.T_base_from_cam[:3, 3])

    @classmethod
    def from_robot(cls, robot: RobotCondition, T_cam_from_base: np.ndarray | None
                   ) -> BaseRays | None:
        """The rays of the camera fitted on the robot condition's ray-cast points (exact for
        them, k4d.camera.fit_pinhole) posed by T_cam_from_base (4, 4); None without a pose
        or with too few robot points to fit the camera on."""
        from k4d.camera import fit_pinhole

        if T_cam_from_base is None:
            return None
        camera = fit_pinhole(robot.pointmap, robot.mask)
        if camera is None:
            return None
        T_base_from_cam = np.linalg.inv(np.asarray(T_cam_from_base, np.float64))
        return cls(camera.ray_directions() @ T_base_from_cam[:3, :3].T, T_base_from_cam)

    def channels(self) -> np.ndarray:
        """(CAMERA_CHANNELS, H, W) float32: the rays' unit directions (3), the centre (3,
        metres) and 1 (known); `unknown_camera` is the same with zeros."""
        unit = self.rays / np.linalg.norm(self.rays, axis=-1, keepdims=True)
        H, W = unit.shape[:2]
        planes = [unit.transpose(2, 0, 1), np.broadcast_to(self.centre[:, None, None], (3, H, W)),
                  np.ones((1, H, W))]
        return np.concatenate(planes).astype(np.float32)

    def plane_depth(self, coordinate: np.ndarray) -> np.ndarray:
        """(3, H, W) depth (metres along the optical axis) where each pixel's ray meets the
        planes x = c, y = c, z = c of `coordinate` (3, H, W) metres; NaN where it does not
        (parallel or behind the camera)."""
        along = self.rays.transpose(2, 0, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            depth = (coordinate - self.centre[:, None, None]) / along
        return np.where((np.abs(along) > 1e-6) & (depth > 0), depth, np.nan)


def unknown_camera(height: int, width: int) -> np.ndarray:
    """(CAMERA_CHANNELS, H, W) zeros: the camera inputs of a rollout without a camera pose."""
    return np.zeros((CAMERA_CHANNELS, height, width), np.float32)


def depth_on_planes(free_depth: np.ndarray, coordinate: np.ndarray, logits: np.ndarray,
                    rays: BaseRays) -> tuple[np.ndarray, np.ndarray]:
    """Frame 0's depth (H, W) metres and the plane each pixel was put on (H, W) int8 (0:
    none, 1-3: x, y, z = const): where the most likely plane's ray depth is within
    PLANE_DEPTH_RATIO of the direct estimate `free_depth`, that depth, else the estimate.
    coordinate (3, H, W) metres, logits (4, H, W)."""
    plane = np.argmax(logits, axis=0)
    on_plane = rays.plane_depth(coordinate)
    chosen = np.take_along_axis(on_plane, np.clip(plane - 1, 0, 2)[None], axis=0)[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = chosen / free_depth
    use = (plane > 0) & np.isfinite(chosen) & (ratio < PLANE_DEPTH_RATIO) & (
        ratio > 1.0 / PLANE_DEPTH_RATIO)
    return (np.where(use, chosen, free_depth).astype(np.float32),
            np.where(use, plane, 0).astype(np.int8))


def depth_scale(robot: RobotCondition) -> float:
    """The robot's mean depth in frame 0 (metres; 1 without robot pixels there): the depth
    unit of the refiner's inputs and of its depth head."""
    first = np.asarray(robot.mask[0], bool)
    depth = np.asarray(robot.pointmap[0, ..., 2], np.float32)  # the inputs' float32 mean
    scale = float(depth[first].mean()) if first.any() else 1.0
    return scale if scale > 0 else 1.0


@dataclass
class RefinedChange:
    """What the refiner predicts for a clip; frame 0 (the observation) is all 0.

    colour       (T, H, W, 3) float32: change of colour from frame 0, levels 0-255
    probability  (T, H, W) float32: that the pixel changed
    depth_m      (T, H, W) float32 metres: change of depth from frame 0 if the pixel
                 changed, or None for a refiner without a depth head
    first_depth_m  (H, W) float32 metres: frame 0's estimated depth, or None for a
                 refiner without that head
    point_probability  (T, H, W) float32: that the pixel changed, by the network that
                 predicts the depths (the geometry network when there is one)
    first_plane  (H, W) int8: the plane of the base frame frame 0's depth was put on (0:
                 none, 1-3: x, y, z = const), or None for a refiner without planes or a
                 rollout without a camera pose
    object_probability  (H, W) float32: that frame 0's pixel shows an object, by the
                 object network, or None for a refiner without one"""

    colour: np.ndarray
    probability: np.ndarray
    depth_m: np.ndarray | None = None
    first_depth_m: np.ndarray | None = None
    point_probability: np.ndarray | None = None
    first_plane: np.ndarray | None = None
    object_probability: np.ndarray | None = None


@torch.no_grad()
def predict_change(refiner: ChangeRefiner, image: np.ndarray, robot: RobotCondition,
                   batch: int = 4, T_cam_from_base: np.ndarray | None = None
                   ) -> RefinedChange:
    """The refiner's change for frames 1..T-1 of the clip (RefinedChange). T_cam_from_base
    (4, 4): the camera's pose the robot condition was rendered with, for a geometry network
    with scene planes (without it, that network's direct depth estimate is used)."""
    T, H, W = robot.mask.shape
    geometry = refiner.geometry_source
    rays = BaseRays.from_robot(robot, T_cam_from_base) if geometry.config.scene_planes else None
    camera = None
    if geometry.config.scene_planes:
        camera = rays.channels() if rays is not None else unknown_camera(H, W)
    planes = np.zeros((PLANE_CHANNELS, H, W), np.float64)
    change = RefinedChange(np.zeros((T, H, W, 3), np.float32), np.zeros((T, H, W), np.float32),
                           np.zeros((T, H, W), np.float32) if geometry.config.depth else None)
    change.point_probability = (change.probability if geometry is refiner
                                else np.zeros((T, H, W), np.float32))
    scale = depth_scale(robot)
    log_first = np.zeros((H, W), np.float64)
    device = next(refiner.parameters()).device
    for start in range(1, T, batch):
        frames = list(range(start, min(start + batch, T)))
        x = refiner_inputs(image, robot, frames, camera).to(device)
        y = refiner(x[:, :refiner.config.inputs]).float().cpu()
        change.colour[frames] = (y[:, :3] * 127.5).permute(0, 2, 3, 1).numpy()
        change.probability[frames] = torch.sigmoid(y[:, 3]).numpy()
        if geometry is not refiner:
            y = geometry(x[:, :geometry.config.inputs]).float().cpu()
            change.point_probability[frames] = torch.sigmoid(y[:, 3]).numpy()
        if change.depth_m is not None:
            change.depth_m[frames] = y[:, 4].numpy() * (scale / DEPTH_GAIN)
        if geometry.config.first_depth:
            log_first += y[:, geometry.config.first_index].double().sum(0).numpy()
        if geometry.config.scene_planes:
            start_plane = geometry.config.planes_index
            planes += y[:, start_plane:start_plane + PLANE_CHANNELS].double().sum(0).numpy()
    objects = refiner.objects
    if objects is not None:  # the given image's objects: frame 0's inputs, once
        x = refiner_inputs(image, robot, [0], camera).to(device)
        y = objects(x[:, :objects.config.inputs]).float().cpu()
        change.object_probability = torch.sigmoid(y[0, objects.config.object_index]).numpy()
    if geometry.config.first_depth and T > 1:
        change.first_depth_m = (scale * np.exp(log_first / (T - 1))).astype(np.float32)
        if rays is not None:  # every frame predicts frame 0's planes: their mean
            planes /= T - 1
            change.first_depth_m, change.first_plane = depth_on_planes(
                change.first_depth_m, planes[:3], planes[3:], rays)
    return change


def save_network(network: nn.Module, model_dir: str | Path, folder: str) -> Path:
    """MODEL_DIR/FOLDER/: config.json (the class name and the network's `config`
    dataclass) + model.safetensors. Shared by the pixel-space networks of a model directory
    (this refiner, k4d_model.cascade's sample refiner)."""
    out = Path(model_dir) / folder
    out.mkdir(parents=True, exist_ok=True)
    config = {"_class_name": type(network).__name__, **asdict(network.config)}
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.detach().contiguous().cpu() for k, v in network.state_dict().items()},
              str(out / WEIGHTS_FILE))
    return out


def load_network(model_dir: str | Path, folder: str, build) -> nn.Module | None:
    """The network of MODEL_DIR/FOLDER/ (`build(config dict)` makes the module its weights
    load into), in eval mode; None when the folder holds none."""
    path = Path(model_dir) / folder
    if not (path / CONFIG_FILE).is_file():
        return None
    network = build(json.loads((path / CONFIG_FILE).read_text()))
    network.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
    return network.eval()


def save_refiner(refiner: ChangeRefiner, model_dir: str | Path) -> Path:
    """MODEL_DIR/refiner/ (config.json + model.safetensors)."""
    return save_network(refiner, model_dir, FOLDER)


def load_refiner(model_dir: str | Path) -> ChangeRefiner | None:
    """The refiner of a model directory, or None when it has none."""
    return load_network(model_dir, FOLDER,
                        lambda config: ChangeRefiner(RefinerConfig.from_dict(config)))


def with_geometry(refiner: ChangeRefiner, geometry: ChangeRefiner) -> ChangeRefiner:
    """One refiner (one folder, one weights file): `refiner`'s colour network with
    `geometry` as its geometry network (RefinerConfig.geometry), weights copied exactly."""
    return _with_network(refiner, "geometry", geometry)


def with_objects(refiner: ChangeRefiner, objects: ChangeRefiner) -> ChangeRefiner:
    """`refiner` with `objects` as its object network (RefinerConfig.objects; it needs the
    object_logit output), weights copied exactly; its other networks are kept."""
    if not objects.config.object_logit:
        raise InvalidArgument.for_field("refiner.objects", "an object network needs the "
                                                           "object_logit output")
    return _with_network(refiner, "objects", objects)


def with_colour(refiner: ChangeRefiner, colour: ChangeRefiner) -> ChangeRefiner:
    """`colour` as the main (colour) network of `refiner`, whose geometry and object
    networks are kept, weights copied exactly: a colour network trained alone (the recipe's
    `refiner` section without its children) put into a model's refiner."""
    _check_alone(colour, "colour")
    combined = ChangeRefiner(replace(colour.config, geometry=refiner.config.geometry,
                                     objects=refiner.config.objects))
    kept = {k: v for k, v in refiner.state_dict().items()
            if k.startswith(("geometry.", "objects."))}
    combined.load_state_dict({**colour.state_dict(), **kept})
    return combined.train(refiner.training)


def _check_alone(network: ChangeRefiner, name: str) -> None:
    if network.geometry is not None or network.objects is not None:
        raise InvalidArgument.for_field(f"refiner.{name}", f"a {name} network has no networks "
                                                           "of its own")


def _with_network(refiner: ChangeRefiner, name: str, network: ChangeRefiner) -> ChangeRefiner:
    _check_alone(network, name)
    combined = ChangeRefiner(replace(refiner.config, **{name: network.config}))
    main = {k: v for k, v in refiner.state_dict().items() if not k.startswith(f"{name}.")}
    combined.load_state_dict({**main, **{f"{name}.{k}": v
                                         for k, v in network.state_dict().items()}})
    return combined.train(refiner.training)
