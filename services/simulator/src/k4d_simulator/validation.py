"""Validation of a SimulationSpec at the front door, with field paths.

Every problem found is reported at once (one InvalidArgument with all field violations),
so a client fixes a request in one round trip. Paths follow the proto field names:
`spec.camera.intrinsics.fx`, `spec.actions.values`, `spec.initial_image`.
Stage workers validate again what they own in depth (e.g. joint counts of a robot);
this catches everything that can be checked without loading a robot or a model.
"""

from __future__ import annotations

import math

import numpy as np
from k4d.camera_proto import camera_violations
from k4d.errors import FieldViolation, InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d.sampling import sampling_layer_from_proto
from k4d.tensor_io import from_tensor
from kinema4d.v1 import kinematics_pb2, simulator_pb2

DEFAULT_NUM_FRAMES = 49
MAX_NUM_FRAMES = 512
MAX_SAMPLING_STEPS = 1000
BACKENDS = ("", "torch", "onnx", "tensorrt", STATIC_WORLD)
SCHEDULERS = ("", "unipc", "euler")
# No "fp8": the generator refuses it (no explicit FP8 quantisation exists), so the front
# door refuses it at Submit instead of letting the job fail at the generator.
PRECISIONS = ("", "fp32", "bf16", "fp16")
PRESETS = ("", "droid", "bridge", "libero")
_A = kinematics_pb2.ActionType
_POSE_WIDTH = {kinematics_pb2.ROTATION_FORMAT_QUATERNION_XYZW: 7,
               kinematics_pb2.ROTATION_FORMAT_EULER_XYZ: 6}


def validate_spec(spec: simulator_pb2.SimulationSpec, prefix: str = "spec") -> None:
    """Raise InvalidArgument listing every violation in `spec`; return None when valid."""
    violations: list[FieldViolation] = []
    p = f"{prefix}." if prefix else ""
    violations += _robot_violations(spec, p)
    violations += _action_violations(spec.actions, p + "actions") if spec.HasField("actions") \
        else [FieldViolation(p + "actions", "required")]
    camera_size = None
    if spec.HasField("camera"):
        camera_violations_ = camera_violations(spec.camera, p + "camera")
        violations += camera_violations_
        if not camera_violations_:
            camera_size = (spec.camera.intrinsics.height, spec.camera.intrinsics.width)
    else:
        violations.append(FieldViolation(p + "camera", "required"))
    violations += _image_violations(spec, p + "initial_image", camera_size)
    violations += _depth_violations(spec, p + "initial_depth", camera_size)
    if spec.num_frames > MAX_NUM_FRAMES or spec.num_frames == 1:
        violations.append(FieldViolation(
            p + "num_frames", f"must be 0 (default {DEFAULT_NUM_FRAMES}) or 2..{MAX_NUM_FRAMES}, "
                              f"got {spec.num_frames}"))
    violations += _sampling_violations(spec, p + "sampling")
    if violations:
        raise InvalidArgument(
            "invalid simulation request: " + "; ".join(f"{v.field}: {v.description}"
                                                       for v in violations), violations)


def _robot_violations(spec, p: str) -> list[FieldViolation]:
    source = spec.robot.WhichOneof("source") if spec.HasField("robot") else None
    if source is None:
        return [FieldViolation(p + "robot", "required: set robot.name (e.g. \"panda\") or "
                                            "robot.bundle_uri")]
    value = getattr(spec.robot, source)
    if not value.strip():
        return [FieldViolation(f"{p}robot.{source}", "must not be empty")]
    return []


def _decoded(data, field: str, violations: list[FieldViolation]) -> np.ndarray | None:
    """The inline array of a TensorData, None when absent or by reference (refs are
    resolved by the stage that reads them)."""
    if data.WhichOneof("kind") != "inline":
        return None
    try:
        return from_tensor(data.inline, field + ".inline")
    except InvalidArgument as exc:
        violations.extend(exc.violations)
        return None


def _action_violations(actions: kinematics_pb2.ActionSequence, p: str) -> list[FieldViolation]:
    out: list[FieldViolation] = []
    if actions.type == _A.ACTION_TYPE_UNSPECIFIED and not actions.preset:
        out.append(FieldViolation(p + ".type", "required (or set a preset)"))
    if actions.preset not in PRESETS:
        out.append(FieldViolation(p + ".preset", f"expected one of {list(PRESETS[1:])}, "
                                                 f"got {actions.preset!r}"))
    if not actions.HasField("values") or actions.values.WhichOneof("kind") is None:
        out.append(FieldViolation(p + ".values", "required: an (N, D) array of actions"))
        return out
    values = _decoded(actions.values, p + ".values", out)
    n_steps = None
    if values is not None:
        if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 1:
            out.append(FieldViolation(p + ".values", f"expected a non-empty (N, D) array, "
                                                     f"got shape {tuple(values.shape)}"))
        elif not np.issubdtype(values.dtype, np.floating) and not np.issubdtype(
                values.dtype, np.integer):
            out.append(FieldViolation(p + ".values", f"expected numbers, got {values.dtype}"))
        else:
            n_steps = values.shape[0]
            bad = np.argwhere(~np.isfinite(values.astype(np.float64)))
            if len(bad):
                out.append(FieldViolation(f"{p}.values[{bad[0][0]}][{bad[0][1]}]",
                                          f"not finite ({len(bad)} non-finite values)"))
            width = _POSE_WIDTH.get(actions.rotation)
            if actions.type in (_A.ACTION_TYPE_EE_ABSOLUTE, _A.ACTION_TYPE_EE_DELTA) and width \
                    and values.shape[1] != width:
                out.append(FieldViolation(p + ".values", f"end-effector rows need {width} values "
                                                         f"for this rotation format, got "
                                                         f"{values.shape[1]}"))
    if actions.type == _A.ACTION_TYPE_JOINT_VELOCITIES and not actions.dt_s > 0:
        out.append(FieldViolation(p + ".dt_s", "must be > 0 for joint velocities"))
    if not math.isfinite(actions.dt_s) or actions.dt_s < 0:
        out.append(FieldViolation(p + ".dt_s", "must be finite and >= 0"))
    if actions.HasField("gripper") and actions.gripper.WhichOneof("kind") is not None:
        gripper = _decoded(actions.gripper, p + ".gripper", out)
        if gripper is not None:
            g = gripper.astype(np.float64).reshape(-1) if gripper.ndim <= 2 else None
            if g is None or gripper.ndim == 0 or (n_steps is not None and g.size != n_steps):
                out.append(FieldViolation(p + ".gripper", f"expected ({n_steps or 'N'},) values, "
                                                          f"got shape {tuple(gripper.shape)}"))
            elif not np.all(np.isfinite(g)) or g.min() < 0 or g.max() > 1:
                out.append(FieldViolation(p + ".gripper", "values must be finite and in [0, 1]"))
    return out


def _tensor_header(data, p: str, out: list[FieldViolation]):
    """(dtype name, shape, the array or None for a reference) of a TensorData, its reference's
    uri and sha256 checked into `out`; None when an inline tensor does not decode."""
    if data.WhichOneof("kind") == "ref":
        ref = data.ref
        if not ref.uri:
            out.append(FieldViolation(p + ".ref.uri", "must not be empty"))
        if len(ref.sha256) != 64:
            out.append(FieldViolation(p + ".ref.sha256", "expected 64 hex characters"))
        return ref.dtype, tuple(ref.shape), None
    array = _decoded(data, p, out)
    return None if array is None else (array.dtype.name, tuple(array.shape), array)


def _image_violations(spec, p: str, camera_hw: tuple[int, int] | None) -> list[FieldViolation]:
    if not spec.HasField("initial_image") or spec.initial_image.WhichOneof("kind") is None:
        return [FieldViolation(p, "required: an (H, W, 3) uint8 image, inline or by reference")]
    out: list[FieldViolation] = []
    header = _tensor_header(spec.initial_image, p, out)
    if header is None:
        return out
    dtype, shape, _ = header
    if dtype != "uint8":
        out.append(FieldViolation(p, f"expected dtype uint8, got {dtype}"))
    if len(shape) != 3 or shape[2] != 3:
        out.append(FieldViolation(p, f"expected shape (H, W, 3), got {shape}"))
    elif camera_hw is not None and shape[:2] != tuple(camera_hw):
        out.append(FieldViolation(p, f"image is {shape[1]}x{shape[0]} (WxH) but the camera is "
                                     f"{camera_hw[1]}x{camera_hw[0]}; they must match"))
    return out


def _depth_violations(spec, p: str, camera_hw: tuple[int, int] | None) -> list[FieldViolation]:
    """The optional depth of the initial image: (H, W) float32 metres >= 0, the camera's size."""
    if not spec.HasField("initial_depth") or spec.initial_depth.WhichOneof("kind") is None:
        return []
    out: list[FieldViolation] = []
    header = _tensor_header(spec.initial_depth, p, out)
    if header is None:
        return out
    dtype, shape, depth = header
    if depth is not None and dtype == "float32" and (
            not np.isfinite(depth).all() or depth.min(initial=0) < 0):
        out.append(FieldViolation(p, "depth must be finite metres >= 0 (0 = unknown)"))
    if dtype != "float32":
        out.append(FieldViolation(p, f"expected dtype float32, got {dtype}"))
    if len(shape) != 2:
        out.append(FieldViolation(p, f"expected shape (H, W), got {shape}"))
    elif camera_hw is not None and shape != tuple(camera_hw):
        out.append(FieldViolation(p, f"depth is {shape[1]}x{shape[0]} (WxH) but the camera is "
                                     f"{camera_hw[1]}x{camera_hw[0]}; they must match"))
    return out


def _sampling_violations(spec, p: str) -> list[FieldViolation]:
    s = spec.sampling
    out: list[FieldViolation] = []
    if s.num_steps > MAX_SAMPLING_STEPS:
        out.append(FieldViolation(p + ".num_steps", f"at most {MAX_SAMPLING_STEPS}, got {s.num_steps}"))
    for name in ("guidance_scale", "shift"):
        value = getattr(s, name)
        if not math.isfinite(value) or value < 0:
            out.append(FieldViolation(f"{p}.{name}", f"must be finite and >= 0, got {value}"))
    for name, allowed in (("backend", BACKENDS), ("scheduler", SCHEDULERS),
                          ("precision", PRECISIONS)):
        if getattr(s, name) not in allowed:
            out.append(FieldViolation(f"{p}.{name}", f"expected one of {list(allowed[1:])}, "
                                                     f"got {getattr(s, name)!r}"))
    try:  # profile, solver, steps, cache, cache_threshold, quant, compile (issue 44)
        sampling_layer_from_proto(s, p)
    except InvalidArgument as exc:
        out.extend(exc.violations)
    if s.backend == STATIC_WORLD and (spec.model.name or spec.model.uri):
        out.append(FieldViolation(p + ".backend", "static-world ignores the model; leave "
                                                  "spec.model empty or pick a model backend"))
    return out
