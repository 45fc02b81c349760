"""The embedded pipeline: kinematics -> projection -> generation in one process.

`run_embedded(spec, store, progress)` calls the stage cores the stage workers call
(`k4d_kinematics.core`, `k4d_projection.core`, `k4d_generator.core`: no servers, no
bus), in the order the cluster runs them, with the timing of every stage and
cancellation checked between stages (and between sampler steps inside generation). Only
the decode and encode around the cores differ: a worker reads its inputs from the event
and the object store and stores its outputs; here the arrays pass from stage to stage.
`StageCores` holds what the stage workers hold per process (robots, the projection
worker's RendererCache, the generator worker's ModelManager).

The SimulationSpec is the contract between `k4d simulate` and the runner; its big
arrays (the initial image and depth) may travel beside it as an `InitialScene`, so that
files read in this process are not encoded into the spec and decoded again.

Without a model the generator's static-world backend composites the robot onto the
unchanged scene; results say so (`static_world=True`, model "static-world").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from k4d.camera_proto import camera_from_proto
from k4d.errors import Cancelled, InvalidArgument
from k4d.initial_scene import camera_pose, depth_pointmap
from k4d.store import from_tensor_data
from k4d.tool import tool_track
from k4d_simulator import DEFAULT_NUM_FRAMES, stage_outcomes, validate_spec
from kinema4d.v1 import common_pb2, simulator_pb2

if TYPE_CHECKING:  # the stage packages are imported when a stage runs (`k4d submit`
    # reads its inputs with this package and needs none of them)
    from k4d_generator import GenerationOutput
    from k4d_kinematics import KinematicsOutput
    from k4d_projection import RenderResult

ProgressFn = Callable[[common_pb2.Progress], None]
CancelFn = Callable[[], bool]
STAGES = ("kinematics", "projection", "generation")
# What an InitialScene supplies in place of the spec's fields of the same name.
SCENE_FIELDS = ("spec.initial_image", "spec.initial_depth")


@dataclass
class InitialScene:
    """The spec's big arrays, decoded once: image (H, W, 3) uint8 (writable: torch refuses
    read-only buffers without a warning), depth (H, W) float32 metres (0 = unknown) of an
    RGB-D observation, or None."""

    image: np.ndarray
    depth: np.ndarray | None = None

    @classmethod
    def from_spec(cls, spec: simulator_pb2.SimulationSpec, store=None) -> InitialScene:
        """Decoded from the spec's `initial_image` / `initial_depth` (inline or by ref)."""
        image = np.array(from_tensor_data(spec.initial_image, store, "spec.initial_image"))
        depth = None
        if spec.HasField("initial_depth") and spec.initial_depth.WhichOneof("kind"):
            depth = np.asarray(from_tensor_data(spec.initial_depth, store,
                                                "spec.initial_depth"), np.float32)
        return cls(image, depth)

    def pointmap(self, spec: simulator_pb2.SimulationSpec) -> np.ndarray | None:
        """(H, W, 3) float32 metres of the depth in the spec's camera, as the generator
        worker reads it (`k4d.initial_scene`); None without a depth."""
        return None if self.depth is None else depth_pointmap(spec, self.depth)


@dataclass
class EmbeddedResult:
    kinematics: KinematicsOutput
    projection: RenderResult  # the robot condition (k4d_projection.core.robot_condition)
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
        from k4d_projection import RendererCache

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
        from k4d_generator import ModelManager

        key = id(store)
        if key not in self._managers:
            # No warm-up step: the embedded mode's first job is the warm-up (a server
            # warms up so that readiness means "fast"; a CLI run would only pay twice).
            self._managers[key] = ModelManager(store, cache_dir=self.cache_dir,
                                               device=self.device, warm_up=False)
        return self._managers[key]

    def sampling(self, spec: simulator_pb2.SimulationSpec, store=None,
                 clip: tuple[int, int, int] | None = None) -> tuple[Any, dict]:
        """(the ModelManager of `store`, the job's sampling settings) with the job's model
        loaded on its backend and precision as the generator worker does it
        (`k4d_generator.core.choose_backend`); static-world for a job without a model.
        With `clip` (T, H, W), InvalidArgument unless the model samples that clip, so a
        job fails before its other stages run."""
        from k4d_generator import choose_backend, sampling_kwargs

        manager = self.models(store)
        ref = spec.model
        return manager, choose_backend(manager, sampling_kwargs(spec.sampling), name=ref.name,
                                       version=ref.version, uri=ref.uri,
                                       precision=spec.sampling.precision, clip=clip)


def _robot_name(spec: simulator_pb2.SimulationSpec) -> str:
    source = spec.robot.WhichOneof("source")
    return getattr(spec.robot, source)


def run_kinematics(spec: simulator_pb2.SimulationSpec, cores: StageCores,
                   store=None) -> KinematicsOutput:
    """Decode the robot and the actions; the kinematics core (the worker's, with its IK
    budget)."""
    from k4d.action_proto import action_spec_from_proto
    from k4d_kinematics import run_kinematics as kinematics_core

    model = cores.robot(_robot_name(spec), store)
    actions = action_spec_from_proto(
        spec.actions, spec.num_frames or DEFAULT_NUM_FRAMES, spec.clip_to_limits,
        lambda data, field, _max: from_tensor_data(data, store, field).astype(np.float64),
        field="spec.actions")
    return kinematics_core(model, actions)


def run_projection(spec: simulator_pb2.SimulationSpec, kin: KinematicsOutput,
                   cores: StageCores, store=None) -> RenderResult:
    """The projection core: every link ray-cast into the camera (the robot condition)."""
    from k4d_projection import robot_condition

    camera = camera_from_proto(spec.camera, "spec.camera")
    model = cores.robot(_robot_name(spec), store)
    return robot_condition(cores.renderer(model), kin.poses, camera)


def run_generation(spec: simulator_pb2.SimulationSpec, scene: InitialScene,
                   robot: RenderResult, cores: StageCores, store=None,
                   progress: ProgressFn | None = None,
                   cancelled: CancelFn | None = None,
                   kin: KinematicsOutput | None = None) -> GenerationOutput:
    """The generation core: the real sampler for a model, static-world without one. `kin`
    gives the model the tool's track (what a model with a tool condition reads)."""
    from k4d_generator import run_generation as generation_core

    def on_step(done: int, total: int) -> None:
        if progress is not None:
            progress(common_pb2.Progress(stage="generation", step=done, total=total,
                                         message="sampling"))

    manager, sampling = cores.sampling(spec, store, clip=robot.mask.shape)
    out = generation_core(manager, scene.image, robot.rgb, robot.pointmap, robot.mask, sampling,
                          initial_pointmap=scene.pointmap(spec),
                          T_cam_from_base=camera_pose(spec), on_step=on_step,
                          tool=(None if kin is None else
                                tool_track(cores.robot(_robot_name(spec), store), kin.joints,
                                           kin.poses)),
                          should_cancel=cancelled)
    if out.static_world:  # one step: its bar completes
        on_step(1, 1)
    return out


def uses_model(spec: simulator_pb2.SimulationSpec) -> bool:
    """Whether generation runs a real model (else the static-world backend)."""
    from k4d_generator import uses_model as core_uses_model

    return core_uses_model(spec.model.name, spec.model.uri, spec.sampling.backend)


def _validate(spec: simulator_pb2.SimulationSpec, scene: InitialScene | None) -> None:
    """The front door's `validate_spec`; with an InitialScene beside the spec, its arrays
    stand for the spec's initial image and depth (checked against the camera here)."""
    try:
        validate_spec(spec)
        violations = []
    except InvalidArgument as exc:
        if scene is None:
            raise
        violations = [v for v in exc.violations if not v.field.startswith(SCENE_FIELDS)]
    if scene is not None:
        violations += scene_violations(scene, spec)
    if violations:
        raise InvalidArgument("invalid simulation request: " + "; ".join(
            f"{v.field}: {v.description}" for v in violations), violations)


def scene_violations(scene: InitialScene, spec: simulator_pb2.SimulationSpec) -> list:
    """What `validate_spec` checks of the initial image and depth, for arrays in hand."""
    from k4d.errors import FieldViolation

    out = []
    size = (spec.camera.intrinsics.height, spec.camera.intrinsics.width)
    image, depth = scene.image, scene.depth
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        out.append(FieldViolation(SCENE_FIELDS[0], f"expected an (H, W, 3) uint8 image, got "
                                                   f"{image.dtype} {image.shape}"))
    elif image.shape[:2] != size:
        out.append(FieldViolation(SCENE_FIELDS[0], f"image is {image.shape[1]}x{image.shape[0]} "
                                                   f"(WxH) but the camera is {size[1]}x{size[0]};"
                                                   " they must match"))
    if depth is not None:
        if depth.dtype != np.float32 or depth.shape != size:
            out.append(FieldViolation(SCENE_FIELDS[1], f"expected (H, W) = {size} float32 metres,"
                                                       f" got {depth.dtype} {depth.shape}"))
        elif not np.isfinite(depth).all() or depth.min(initial=0) < 0:
            out.append(FieldViolation(SCENE_FIELDS[1], "depth must be finite metres >= 0 "
                                                       "(0 = unknown)"))
    return out


def run_embedded(spec: simulator_pb2.SimulationSpec, store=None,
                 progress: ProgressFn | None = None, *, cores: StageCores | None = None,
                 cancelled: CancelFn | None = None,
                 scene: InitialScene | None = None) -> EmbeddedResult:
    """Run the three stages in process. progress: called with stage progress (every stage
    reports 0/1 at its start and 1/1 at its end; generation also per sampler step).
    cancelled: polled between stages and sampler steps; raises Cancelled when true.
    scene: the initial image (and depth) in hand, for a spec that leaves them out (else
    they are read from the spec)."""
    _validate(spec, scene)
    cores = cores or StageCores()
    report = progress or (lambda _p: None)
    seconds: dict[str, float] = {}
    scene = scene or InitialScene.from_spec(spec, store)

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
        cores.sampling(spec, store, clip=(num_frames, intrinsics.height, intrinsics.width))
        seconds["model_load"] = time.perf_counter() - start
    kin = stage("kinematics", lambda: run_kinematics(spec, cores, store))
    proj = stage("projection", lambda: run_projection(spec, kin, cores, store))
    gen = stage("generation", lambda: run_generation(spec, scene, proj, cores, store, report,
                                                     cancelled, kin))
    return EmbeddedResult(kin, proj, gen, scene.image, seconds)
