"""The embedded pipeline: kinematics -> projection -> generation in one process.

`run_embedded(spec, store, progress)` calls the stage cores directly (no servers, no
bus), in the order the cluster runs them, with the timing of every stage and
cancellation checked between stages (and between sampler steps inside generation).
`StageCores` holds the classes the stage workers run (the projection worker's
RendererCache, the generator worker's ModelManager), so both modes run the same code.

Without a model the generator's static-world backend composites the robot onto the
unchanged scene; results say so (`static_world=True`, model "static-world").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from k4d.camera_proto import camera_from_proto
from k4d.errors import Cancelled, FieldViolation, InvalidArgument
from k4d.generation import STATIC_WORLD
from k4d.initial_scene import initial_pointmap
from k4d.store import from_tensor_data
from k4d_simulator.outcomes import stage_outcomes
from k4d_simulator.validation import DEFAULT_NUM_FRAMES, validate_spec
from kinema4d.v1 import common_pb2, simulator_pb2

ProgressFn = Callable[[common_pb2.Progress], None]
CancelFn = Callable[[], bool]
STAGES = ("kinematics", "projection", "generation")


@dataclass
class KinematicsOutput:
    """joints (T, J) float64; poses (T, L, 4, 4) float64 T_base_from_link."""

    joint_names: list[str]
    link_names: list[str]
    joints: np.ndarray
    poses: np.ndarray
    failed_frames: int = 0


@dataclass
class ProjectionOutput:
    """The robot condition, pixel-aligned with the image: depth (T, H, W) float32,
    pointmap (T, H, W, 3) float32 camera frame, mask (T, H, W) bool, link_id (T, H, W)
    int16 (-1 background), rgb (T, H, W, 3) uint8 shaded robot on black."""

    depth: np.ndarray
    pointmap: np.ndarray
    mask: np.ndarray
    link_id: np.ndarray
    rgb: np.ndarray


@dataclass
class GenerationOutput:
    """rgb (T, H, W, 3) uint8; pointmap (T, H, W, 3) float32 in the first frame's camera,
    metres when `metric`; model: name/version/variant/...; static_world flags the
    composite backend."""

    rgb: np.ndarray
    pointmap: np.ndarray
    metric: bool
    model: dict[str, Any]
    seed: int
    static_world: bool
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class EmbeddedResult:
    kinematics: KinematicsOutput
    projection: ProjectionOutput
    generation: GenerationOutput
    image: np.ndarray  # (H, W, 3) uint8 initial image
    stage_seconds: dict[str, float]

    def outcomes(self) -> list[simulator_pb2.StageOutcome]:
        """Every stage's outcome, built as the cluster's job table builds them
        (`SimulationResult.stages`): the same failed frames and warnings in both modes."""
        return stage_outcomes(self.stage_seconds, failed_frames=self.kinematics.failed_frames,
                              num_frames=int(self.kinematics.joints.shape[0]),
                              static_world=self.generation.static_world)

    def robot_arrays(self) -> dict[str, np.ndarray]:
        """robot.npz content (DESIGN.md keys)."""
        k, p = self.kinematics, self.projection
        return {"link_names": np.array(k.link_names), "joint_names": np.array(k.joint_names),
                "joints": k.joints, "poses": k.poses, "depth": p.depth, "pointmap": p.pointmap,
                "mask": p.mask, "link_id": p.link_id, "rgb": p.rgb}


class StageCores:
    """The classes the stage workers run, held for the jobs of one process: robots as the
    kinematics stage loads them (`load_robot`, cached per robot), the projection worker's
    `RendererCache`, and the generator worker's `ModelManager` (its model load, its
    sampling lock and its static-world path). Jobs run in order in the embedded mode."""

    def __init__(self, render_engine: str = "open3d", device: str = "cpu",
                 cache_dir: str | None = None):
        from k4d_projection.core import RendererCache

        self.render_engine, self.device, self.cache_dir = render_engine, device, cache_dir
        self.renderers = RendererCache(engine=render_engine)
        self._managers: dict[int, Any] = {}  # id(store) -> ModelManager (registry store)

    def robot(self, name: str, store=None):
        from k4d.robots.descriptions import load_robot

        return load_robot(name, store) if store is not None else load_robot(name)

    def renderer(self, model):
        return self.renderers.get(model, collision=False)

    def models(self, store=None):
        """The ModelManager of `store` (the registry models are read from)."""
        from k4d_generator.service import ModelManager

        key = id(store)
        if key not in self._managers:
            # No warm-up step: the embedded mode's first job is the warm-up (a server
            # warms up so that readiness means "fast"; a CLI run would only pay twice).
            self._managers[key] = ModelManager(store, cache_dir=self.cache_dir,
                                               device=self.device, warm_up=False)
        return self._managers[key]

    def generator(self, model_ref: common_pb2.ModelRef, sampling, store=None,
                  clip: tuple[int, int, int] | None = None):
        """The manager with `model_ref` loaded on the job's backend (as the generator
        worker ensures it); with `clip` (T, H, W), InvalidArgument unless the model samples
        that clip, so a job fails before its other stages run."""
        from k4d_generator.service import model_ref_string

        manager = self.models(store)
        backend = sampling.backend or "torch"
        loaded = manager.loaded
        if loaded is None or loaded.backend != backend or not loaded.matches(
                model_ref.name, model_ref.version, model_ref.uri):
            loaded = manager.load(model_ref_string(model_ref.name, model_ref.version,
                                                   model_ref.uri),
                                  backend, sampling.precision or None)
        if clip is not None:
            info = loaded.pipeline.info
            native = (info.num_frames, info.height, info.width)
            if tuple(clip) != native:
                raise InvalidArgument(
                    f"model {info.name} samples {native[0]} frames at {native[2]}x{native[1]};"
                    f" the job asks for {clip[0]} frames at {clip[2]}x{clip[1]}",
                    [FieldViolation("spec.num_frames", f"the model samples {native[0]} frames"),
                     FieldViolation("spec.camera.intrinsics",
                                    f"the model samples {native[2]}x{native[1]} images")])
        return manager

def _robot_name(spec: simulator_pb2.SimulationSpec) -> str:
    source = spec.robot.WhichOneof("source")
    return getattr(spec.robot, source)


def run_kinematics(spec: simulator_pb2.SimulationSpec, cores: StageCores,
                   store=None) -> KinematicsOutput:
    """Actions -> joint trajectory (IK for end-effector actions) -> full-tree FK."""
    from k4d.action_proto import action_spec_from_proto
    from k4d_kinematics.trajectory import solve_actions

    model = cores.robot(_robot_name(spec), store)
    actions = action_spec_from_proto(
        spec.actions, spec.num_frames or DEFAULT_NUM_FRAMES, spec.clip_to_limits,
        lambda data, field, _max: from_tensor_data(data, store, field).astype(np.float64),
        field="spec.actions")
    trajectory = solve_actions(model, actions)
    return KinematicsOutput(list(model.joint_names), list(model.link_names),
                            np.asarray(trajectory.joints, np.float64),
                            np.asarray(trajectory.poses, np.float64),
                            int((~np.asarray(trajectory.success, bool)).sum()))


def run_projection(spec: simulator_pb2.SimulationSpec, kin: KinematicsOutput,
                   cores: StageCores, store=None) -> ProjectionOutput:
    """Ray-cast every link into the camera: the robot condition."""
    from k4d_projection.renderer import CONDITION_OUTPUTS

    camera = camera_from_proto(spec.camera, "spec.camera")
    model = cores.robot(_robot_name(spec), store)
    rendered = cores.renderer(model).render(kin.poses, camera, outputs=CONDITION_OUTPUTS)
    return ProjectionOutput(rendered.depth, rendered.pointmap, rendered.mask, rendered.link_id,
                            rendered.rgb)


def run_generation(spec: simulator_pb2.SimulationSpec, image: np.ndarray,
                   robot: ProjectionOutput, cores: StageCores, store=None,
                   progress: ProgressFn | None = None,
                   cancelled: CancelFn | None = None) -> GenerationOutput:
    """The world's reaction: the real sampler for a model, static-world without one."""
    sampling = spec.sampling

    def on_step(done: int, total: int) -> None:
        if progress is not None:
            progress(common_pb2.Progress(stage="generation", step=done, total=total,
                                         message="sampling"))

    from k4d_generator.api import sampling_kwargs

    kwargs = sampling_kwargs(sampling)  # the generator worker's reading of SamplingParams
    T, H, W = robot.mask.shape
    if uses_model(spec):
        manager = cores.generator(spec.model, sampling, store, clip=(T, H, W))
        kwargs["backend"] = manager.loaded.backend
    else:  # the generator worker's static-world path (intrinsics from the robot pointmap)
        manager, kwargs["backend"] = cores.models(store), STATIC_WORLD
    result = manager.generate(image, robot.rgb, robot.pointmap, robot.mask, callback=on_step,
                              should_cancel=cancelled,
                              initial_pointmap=initial_pointmap(spec, store), **kwargs)
    meta, seed = result.metadata, kwargs["seed"]
    static = kwargs["backend"] == STATIC_WORLD
    if static:
        on_step(1, 1)
        model = {"name": STATIC_WORLD, "version": "", "variant": STATIC_WORLD}
    else:
        model = {**meta.get("model", {}), "model_id": meta.get("model_id", "")}
    return GenerationOutput(result.rgb, result.pointmap,
                            metric=meta.get("pointmap_units") == "metres", model=model,
                            seed=seed, static_world=static, metadata=dict(meta))


def uses_model(spec: simulator_pb2.SimulationSpec) -> bool:
    """Whether generation runs a real model (else the static-world backend)."""
    return spec.sampling.backend != STATIC_WORLD and bool(spec.model.name or spec.model.uri)


def load_initial_image(spec: simulator_pb2.SimulationSpec, store=None) -> np.ndarray:
    """(H, W, 3) uint8, writable (torch refuses read-only buffers without a warning)."""
    return np.array(from_tensor_data(spec.initial_image, store, "spec.initial_image"))


def run_embedded(spec: simulator_pb2.SimulationSpec, store=None,
                 progress: ProgressFn | None = None, *, cores: StageCores | None = None,
                 cancelled: CancelFn | None = None) -> EmbeddedResult:
    """Run the three stages in process. progress: called with stage progress (every stage
    reports 0/1 at its start and 1/1 at its end; generation also per sampler step).
    cancelled: polled between stages and sampler steps; raises Cancelled when true."""
    validate_spec(spec)
    cores = cores or StageCores()
    report = progress or (lambda _p: None)
    seconds: dict[str, float] = {}
    image = load_initial_image(spec, store)

    def stage(name: str, fn):
        if cancelled is not None and cancelled():
            raise Cancelled(f"cancelled before the {name} stage")
        report(common_pb2.Progress(stage=name, step=0, total=1, message="started"))
        start = time.perf_counter()
        out = fn()
        seconds[name] = time.perf_counter() - start
        report(common_pb2.Progress(stage=name, step=1, total=1, message="done"))
        return out

    if uses_model(spec):
        # Load the model first, so a wrong name or a clip it cannot sample fails before the
        # other stages run; run_generation then finds it in the cache (same key).
        start = time.perf_counter()
        intrinsics = spec.camera.intrinsics
        num_frames = spec.num_frames or DEFAULT_NUM_FRAMES
        cores.generator(spec.model, spec.sampling, store,
                        clip=(num_frames, intrinsics.height, intrinsics.width))
        seconds["model_load"] = time.perf_counter() - start
    kin = stage("kinematics", lambda: run_kinematics(spec, cores, store))
    proj = stage("projection", lambda: run_projection(spec, kin, cores, store))
    gen = stage("generation", lambda: run_generation(spec, image, proj, cores, store, report,
                                                     cancelled))
    return EmbeddedResult(kin, proj, gen, image, seconds)
