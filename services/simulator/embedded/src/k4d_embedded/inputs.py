"""Build a SimulationSpec from the files a user has: robot name, actions JSON, initial
image (PNG/JPEG), camera JSON, optional model and sampling settings.

Used by `k4d simulate` (embedded: `load_simulation`, the initial image and depth beside
the spec) and `k4d submit` (cluster: `build_spec`, the same spec with them inline).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from k4d.action_proto import spec_to_proto
from k4d.camera_proto import camera_to_proto
from k4d.errors import InvalidArgument
from k4d.sampling import sampling_params_fields
from k4d.tensor_io import to_tensor
from kinema4d.v1 import common_pb2, generator_pb2, simulator_pb2

from k4d_embedded.pipeline import InitialScene
from k4d_embedded.shipped import is_shipped_model, verify_shipped_model


@dataclass
class SimulationInputs:
    robot: str
    actions: Path
    image: Path
    camera: Path
    model: str = ""           # registry name[/version] or a model directory / URI
    steps: int = 0
    seed: int = 0
    guidance: float = 0.0
    backend: str = ""
    frames: int = 0
    downscale: int = 1        # divide image and camera by this (quick previews, tests)
    clip_to_limits: bool = False
    depth: Path | None = None  # optional depth of the image (.npy metres, 16-bit PNG mm)
    # sampling options of the request (k4d.sampling: profile, solver, cache, ...; `steps`
    # above is its step count), checked by k4d.sampling.sampling_layer_from_flags
    sampling: dict = field(default_factory=dict)


def load_image(path: Path, field: str = "--image") -> np.ndarray:
    """(H, W, 3) uint8 RGB of an image file (alpha dropped, grey expanded)."""
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise InvalidArgument.for_field(field, f"no such file: {path}")
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as exc:
        raise InvalidArgument.for_field(field, f"not a readable image: {exc}") from None


def load_depth(path: Path, size: tuple[int, int], field: str = "--depth") -> np.ndarray:
    """(H, W) float32 metres (0 = unknown) of a depth file: .npy of metres (float) or a
    16-bit PNG of millimetres (what RGB-D cameras write); `size` (H, W) of the image."""
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise InvalidArgument.for_field(field, f"no such file: {path}")
    try:
        if path.suffix.lower() == ".npy":
            depth = np.load(path, allow_pickle=False).astype(np.float32)
        else:
            with Image.open(path) as img:
                if img.mode not in ("I;16", "I;16B", "I"):
                    raise InvalidArgument.for_field(field, f"{path} is a {img.mode} image; a depth "
                                                           "PNG holds 16-bit millimetres")
                depth = np.asarray(img, dtype=np.float32) / 1000.0
    except (ValueError, OSError, UnidentifiedImageError) as exc:
        raise InvalidArgument.for_field(field, f"not a readable depth file: {exc}") from None
    if depth.shape != tuple(size):
        raise InvalidArgument.for_field(field, f"depth is {depth.shape[-1] if depth.ndim else 0}x"
                                               f"{depth.shape[0] if depth.ndim else 0} (WxH), the "
                                               f"image {size[1]}x{size[0]}; they must match")
    if not np.isfinite(depth).all() or depth.min() < 0:
        raise InvalidArgument.for_field(field, "depth must be finite metres >= 0 (0 = unknown)")
    return depth


def downscale_depth(depth: np.ndarray, factor: int) -> np.ndarray:
    """Shrink a depth map by an integer factor: the mean of each block's known (> 0) depths,
    0 where a block knows none."""
    if factor <= 1:
        return depth
    h, w = depth.shape[0] // factor, depth.shape[1] // factor
    blocks = depth[:h * factor, :w * factor].reshape(h, factor, w, factor)
    known = (blocks > 0).sum(axis=(1, 3))
    total = blocks.sum(axis=(1, 3))
    return np.where(known > 0, total / np.maximum(known, 1), 0.0).astype(np.float32)


def load_camera(path: Path, field: str = "--camera"):
    from k4d.camera import Camera

    if not path.is_file():
        raise InvalidArgument.for_field(field, f"no such file: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument.for_field(field, f"not valid JSON: {exc}") from None
    return Camera.from_dict(data, field_prefix="camera")


def downscale(image: np.ndarray, camera, factor: int):
    """Shrink image and camera together by an integer factor (pixel centres kept:
    c' = (c + 0.5) / k - 0.5)."""
    if factor == 1:
        return image, camera
    if factor < 1:
        raise InvalidArgument.for_field("--downscale", "must be >= 1")
    from k4d.camera import Camera
    from PIL import Image

    h, w = image.shape[0] // factor, image.shape[1] // factor
    if h < 1 or w < 1:
        raise InvalidArgument.for_field("--downscale", f"{factor} leaves no pixel of the "
                                        f"{image.shape[1]}x{image.shape[0]} image")
    small = np.asarray(Image.fromarray(image).resize((w, h), Image.Resampling.BOX), np.uint8)
    scaled = Camera(width=w, height=h, fx=camera.fx / factor, fy=camera.fy / factor,
                    cx=(camera.cx + 0.5) / factor - 0.5, cy=(camera.cy + 0.5) / factor - 0.5,
                    T_cam_from_world=camera.T_cam_from_world, distortion=camera.distortion,
                    T_world_from_base=camera.T_world_from_base)
    return small, scaled


def load_actions(path: Path, field: str = "--actions"):
    """The actions JSON file (format: docs/kinematics.md) -> (ActionSpec, ActionSequence
    proto), parsed and validated by the kinematics package's own reader."""
    if not path.is_file():
        raise InvalidArgument.for_field(field, f"no such file: {path}")
    from k4d.actions import parse_actions
    try:
        document = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument.for_field(field, f"not valid JSON: {exc}") from None
    spec = parse_actions(document)
    return spec, spec_to_proto(spec)


_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # k4d_model.registry's rule


def model_ref(text: str) -> common_pb2.ModelRef:
    """`name`, `name/version`, `registry:name[/version]` (what `k4d train` and
    `k4d generate publish` print), a directory path, or a URI (s3://, file://)."""
    if not text:
        return common_pb2.ModelRef()
    if text.startswith("registry:"):
        text = text[len("registry:"):]
        if not text:
            raise InvalidArgument.for_field("--model", "expected registry:NAME[/VERSION], got 'registry:'")
        name, _, version = text.partition("/")
        return common_pb2.ModelRef(name=name, version=version)
    if "://" in text:
        return common_pb2.ModelRef(uri=text)
    if Path(text).expanduser().exists():
        path = Path(text).expanduser()
        if is_shipped_model(path):  # a model shipped in the repository: sha256 checked first
            path, _ = verify_shipped_model(path)
        return common_pb2.ModelRef(uri=str(path.resolve()))
    name, _, version = text.partition("/")
    if not _MODEL_NAME.match(name) or (version and not _MODEL_NAME.match(version)):
        # Not NAME[/VERSION] but a path, and it is missing (without this, '/x' parsed as
        # name '' = no model, and the run silently fell back to static-world).
        raise InvalidArgument.for_field("--model", f"no such model directory: {text} (and not a "
                                                   "registry NAME[/VERSION])")
    return common_pb2.ModelRef(name=name, version=version)


def build_spec(inputs: SimulationInputs) -> simulator_pb2.SimulationSpec:
    """The whole SimulationSpec, the initial image (and depth) inline: what `k4d submit`
    sends."""
    spec, scene = load_simulation(inputs)
    spec.initial_image.inline.CopyFrom(to_tensor(scene.image))
    if scene.depth is not None:
        spec.initial_depth.inline.CopyFrom(to_tensor(scene.depth))
    return spec


def load_simulation(inputs: SimulationInputs) -> tuple[simulator_pb2.SimulationSpec, InitialScene]:
    """The SimulationSpec without its big arrays, and those arrays (InitialScene): what
    `k4d simulate` hands the embedded runner, so that no array read here is encoded into
    the spec and decoded back in the same process."""
    image = load_image(inputs.image)
    camera = load_camera(inputs.camera)
    depth = load_depth(inputs.depth, image.shape[:2]) if inputs.depth is not None else None
    image, camera = downscale(image, camera, inputs.downscale)
    if depth is not None:
        depth = downscale_depth(depth, inputs.downscale)
    actions, actions_proto = load_actions(inputs.actions)
    if actions.robot and actions.robot != inputs.robot:
        raise InvalidArgument.for_field(
            "--robot", f"{inputs.robot!r}, but {inputs.actions} is for robot {actions.robot!r}")
    spec = simulator_pb2.SimulationSpec(
        robot=common_pb2.RobotRef(name=inputs.robot),
        actions=actions_proto,
        camera=camera_to_proto(camera),
        model=model_ref(inputs.model),
        sampling=generator_pb2.SamplingParams(steps=inputs.steps or
                                              inputs.sampling.get("steps", 0), seed=inputs.seed,
                                              guidance_scale=inputs.guidance,
                                              backend=inputs.backend,
                                              **sampling_params_fields(
                                                  {k: v for k, v in inputs.sampling.items()
                                                   if k != "steps"})),
        num_frames=inputs.frames or actions.num_frames,
        clip_to_limits=inputs.clip_to_limits or actions.clip)
    return spec, InitialScene(np.require(image, requirements="W"), depth)  # torch: writable
