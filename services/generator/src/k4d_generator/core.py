"""The generation stage core: which model a job samples with (loading it if this process
may), and the sampling itself -> the world's RGB and pointmap.

No store or bus: the stage worker (decode the event -> `choose_backend` +
`run_generation` -> store the arrays and the video) and the embedded runner call it with
the process's `ModelManager`, so both modes pick the model, the backend and the
static-world fallback the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from k4d.errors import FailedPrecondition, FieldViolation, InvalidArgument
from k4d.model_names import STATIC_WORLD

from k4d_generator.service import LoadedModel, ModelManager, model_ref_string


@dataclass
class GenerationOutput:
    """rgb (T, H, W, 3) uint8; pointmap (T, H, W, 3) float32 in the first frame's camera,
    metres when `metric`; model: name/version/variant/... (model_id when a model ran);
    static_world flags the composite backend; metadata: the sampler's (fps, backend...)."""

    rgb: np.ndarray
    pointmap: np.ndarray
    metric: bool
    model: dict[str, Any]
    seed: int
    static_world: bool
    metadata: dict[str, Any] = field(default_factory=dict)


def uses_model(name: str, uri: str, backend: str) -> bool:
    """Whether a job runs a real model (else the static-world backend)."""
    return backend != STATIC_WORLD and bool(name or uri)


def ensure_model(manager: ModelManager, name: str, version: str, uri: str, backend: str,
                 precision: str, served_model: str = "") -> LoadedModel:
    """The job's model on the job's backend and precision ("" = the loaded one's) is the
    loaded one; else load it, unless this process serves its start-up model
    (`served_model`) only: then FailedPrecondition."""
    loaded = manager.loaded
    if loaded is not None and backend in ("", loaded.backend) \
            and precision in ("", loaded.precision) and loaded.matches(name, version, uri):
        return loaded
    wanted = model_ref_string(name, version, uri)
    if served_model:
        serving = (f"{loaded.ref} on {loaded.backend} {loaded.precision}"
                   if loaded is not None else served_model)
        asked = " ".join(x for x in (backend, precision) if x)
        raise FailedPrecondition(
            f"this generator serves {serving[:200]} (K4D_GENERATOR_MODEL); the job asks "
            f"for {wanted[:200]}{' on ' + asked if asked else ''}")
    return manager.load(wanted, backend or "torch", precision or None)


def check_clip(loaded: LoadedModel, clip: tuple[int, int, int]) -> None:
    """InvalidArgument unless the model samples clips of (T, H, W) = `clip`."""
    info = loaded.pipeline.info
    native = (info.num_frames, info.height, info.width)
    if tuple(clip) != native:
        raise InvalidArgument(
            f"model {info.name} samples {native[0]} frames at {native[2]}x{native[1]};"
            f" the job asks for {clip[0]} frames at {clip[2]}x{clip[1]}",
            [FieldViolation("spec.num_frames", f"the model samples {native[0]} frames"),
             FieldViolation("spec.camera.intrinsics",
                            f"the model samples {native[2]}x{native[1]} images")])


def choose_backend(manager: ModelManager, sampling: dict, *, name: str = "", version: str = "",
                   uri: str = "", precision: str = "", served_model: str = "",
                   clip: tuple[int, int, int] | None = None) -> dict:
    """`sampling` (the generator's reading of SamplingParams, `api.sampling_kwargs`) with
    its backend settled: the loaded model's (loaded here if needed; with `clip`, checked
    to sample that clip) or STATIC_WORLD for a job that names no model."""
    sampling = dict(sampling)
    if not uses_model(name, uri, sampling["backend"]):
        sampling["backend"] = STATIC_WORLD
        return sampling
    loaded = ensure_model(manager, name, version, uri, sampling["backend"], precision,
                          served_model)
    if clip is not None:
        check_clip(loaded, clip)
    sampling["backend"] = loaded.backend
    return sampling


def run_generation(manager: ModelManager, image: np.ndarray, robot_rgb: np.ndarray,
                   robot_pointmap: np.ndarray, robot_mask: np.ndarray, sampling: dict, *,
                   initial_pointmap: np.ndarray | None = None,
                   T_cam_from_base: np.ndarray | None = None, tool=None,
                   on_step: Callable[[int, int], None] | None = None,
                   should_cancel: Callable[[], bool] | None = None) -> GenerationOutput:
    """Sample the world's reaction to the robot condition. `sampling` from
    `choose_backend`; initial_pointmap: optional (H, W, 3) metres of the first frame (an
    RGB-D observation); T_cam_from_base: optional (4, 4) pose of the camera the robot
    condition was rendered with (k4d_model.pipeline); tool: optional k4d.tool.ToolTrack (read by a
    model with a tool condition, required by one); on_step(done, total) per sampler step;
    should_cancel is polled between steps (Cancelled when true)."""
    result = manager.generate(image, robot_rgb, robot_pointmap, robot_mask, callback=on_step,
                              should_cancel=should_cancel, initial_pointmap=initial_pointmap,
                              T_cam_from_base=T_cam_from_base, tool=tool, **sampling)
    meta = result.metadata
    static = sampling["backend"] == STATIC_WORLD
    if static:
        model = {"name": STATIC_WORLD, "version": "", "variant": STATIC_WORLD}
    else:
        model = {**(meta.get("model") or {}), "model_id": meta.get("model_id", "")}
    return GenerationOutput(result.rgb, result.pointmap,
                            metric=meta.get("pointmap_units") == "metres", model=model,
                            seed=sampling["seed"], static_world=static, metadata=dict(meta))
