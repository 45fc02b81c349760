"""Kafka stage `k4d.sim.projected` -> generation -> `k4d.sim.completed`, plus hot reload
on `k4d.model.published`.

`StageWorker.for_stage` runs the prologue every stage shares (read the event, skip a
cancelled job: marker `jobs/<id>/cancel`, SimulationFailed{CANCELLED}, also when the
marker appears between sampler steps). For each ProjectionCompleted: decode the initial
image (and depth) and the robot condition; run the generation core
(`k4d_generator.core`: choose_backend, run_generation) with the process's model
(`GeneratorService` shares one `ModelManager` between gRPC and this stage; with no
start-up model, a job's model is loaded on first use; an empty model = the static-world
generator), publishing SimulationProgress per step on `k4d.sim.progress`; store rgb, pointmap and rgb.mp4 at `jobs/<id>/generation/<name>`;
publish SimulationCompleted. Sampling is seeded, so a redelivered event rewrites the same
bytes. Bad input raises InvalidArgument/NotFound, which the StageWorker sends to the
dead-letter topic at once.

Model announcements are broadcast: every generator process listens on
`k4d.model.published` in its own consumer group and switches, between jobs, to a newer
published version of the model it serves.

Nothing is consumed before the start-up model is loaded (`StartupLoad.wait`): a load
inside the Kafka handler would outlast `max.poll.interval.ms` and make the group
rebalance and redeliver in a loop. With a start-up model, a job naming another model
fails at once (FailedPrecondition, dead-lettered) instead of loading a second model.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from pathlib import Path

from k4d.bus import StageWorker
from k4d.bus.stage_events import StageContext, is_cancelled, publish_stage_event
from k4d.bus.topics import (
    MODEL_PUBLISHED,
    SIM_COMPLETED,
    SIM_PROGRESS,
    SIM_PROJECTED,
)
from k4d.bus.worker import PERMANENT_ERRORS
from k4d.errors import FailedPrecondition
from k4d.initial_scene import camera_pose, initial_pointmap
from k4d.logs import get_logger
from k4d.model_events import read_model_published
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import RobotRegistry
from k4d.settings import current as current_settings
from k4d.store import from_tensor_data, get_array, job_key, put_array
from k4d.tensor_io import TensorRef
from k4d.tool import ToolTrack, tool_track
from kinema4d.v1 import common_pb2, events_pb2, simulator_pb2

from k4d_generator.api import model_info_proto, sampling_kwargs
from k4d_generator.core import GenerationOutput, choose_backend, run_generation
from k4d_generator.outputs import write_video
from k4d_generator.service import ModelManager

STAGE = "generation"
GROUP_ID = "k4d-generator"
log = get_logger(__name__)


class GenerationStage:
    def __init__(self, bus, store, manager: ModelManager, served_model: str = ""):
        self.bus, self.store, self.manager = bus, store, manager
        self.served_model = served_model  # the start-up model: the only one served
        self.robots = RobotRegistry(store)  # the tool track's robot (a tool condition reads it)

    def handle(self, event: events_pb2.ProjectionCompleted, context: StageContext) -> None:
        started = time.perf_counter()
        # decode
        spec = event.spec
        image = from_tensor_data(spec.initial_image, self.store, "spec.initial_image")
        robot = {name: get_array(self.store, TensorRef.from_proto(getattr(event, name), name),
                                 field=name) for name in ("rgb", "pointmap", "mask")}
        sampling = choose_backend(self.manager, sampling_kwargs(spec.sampling),
                                  name=spec.model.name, version=spec.model.version,
                                  uri=spec.model.uri, precision=spec.sampling.precision,
                                  served_model=self.served_model)
        # core (a cancel marker seen between sampler steps raises Cancelled: the
        # StageWorker's prologue reports it)
        out = run_generation(
            self.manager, image, robot["rgb"], robot["pointmap"], robot["mask"], sampling,
            initial_pointmap=initial_pointmap(spec, self.store), T_cam_from_base=camera_pose(spec),
            tool=self._tool(event),
            on_step=lambda done, total: self._progress(context, done, total),
            should_cancel=lambda: is_cancelled(self.store, context.job_id))
        # encode
        job_id = context.job_id
        outputs = {name: put_array(self.store, job_key(job_id, STAGE, name), array)
                   for name, array in (("rgb", out.rgb), ("pointmap", out.pointmap))}
        video_uri = self._store_video(job_id, out)
        sim_result = simulator_pb2.SimulationResult(
            rgb=outputs["rgb"].to_proto(), pointmap=outputs["pointmap"].to_proto(),
            robot_pointmap=event.pointmap, robot_mask=event.mask, robot_rgb=event.rgb,
            joints=event.joints, poses=event.poses, rgb_video_uri=video_uri,
            model=model_info_proto({**out.model, "loaded": True}))
        for stage, seconds in event.stage_seconds.items():
            sim_result.stage_seconds[stage] = seconds
        sim_result.stage_seconds[STAGE] = time.perf_counter() - started
        publish_stage_event(self.bus, SIM_COMPLETED, context,
                            events_pb2.SimulationCompleted(result=sim_result))

    def _tool(self, event: events_pb2.ProjectionCompleted) -> ToolTrack:
        """The tool's track from the kinematics stage's joints and link poses."""
        model = robot_from_ref(event.spec.robot, self.robots, "spec.robot")
        joints, poses = (get_array(self.store, TensorRef.from_proto(getattr(event, name), name),
                                   field=name) for name in ("joints", "poses"))
        return tool_track(model, joints, poses)

    def _store_video(self, job_id: str, out: GenerationOutput) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_video(Path(tmp) / "rgb.mp4", out.rgb, int(out.metadata.get("fps", 24)))
            return self.store.put_file(job_key(job_id, STAGE, "rgb.mp4"), path).uri

    def _progress(self, context, done: int, total: int) -> None:
        publish_stage_event(self.bus, SIM_PROGRESS, context, events_pb2.SimulationProgress(
            progress=common_pb2.Progress(stage=STAGE, step=done, total=total,
                                         message="sampling")))


class ModelReloader:
    """Handles `k4d.model.published`: switch to a newer version of the served model."""

    def __init__(self, manager: ModelManager):
        self.manager = manager

    def handle(self, message) -> None:
        event = read_model_published(message)
        reloaded = self.manager.on_model_published(event.model.name, event.model.version)
        if reloaded is not None:
            log.info("hot-reloaded model", extra={"model": reloaded.ref})


class GeneratorWorker:
    """The stage worker and the reload listener, run together (`run(stop_event)`) once
    the start-up model is loaded."""

    def __init__(self, stage_worker: StageWorker, reload_worker: StageWorker, startup=None):
        self.stage_worker, self.reload_worker = stage_worker, reload_worker
        self.startup = startup

    def run(self, stop_event: threading.Event) -> None:
        if self.startup is not None and not self.startup.wait(stop_event):
            return  # stopped while loading
        reload_thread = threading.Thread(target=self.reload_worker.run, args=(stop_event,),
                                         name="generator-reload", daemon=True)
        reload_thread.start()
        try:
            self.stage_worker.run(stop_event)
        finally:
            stop_event.set()
            reload_thread.join(timeout=10)


def build_worker(config, bus, store, manager: ModelManager | None = None,
                 startup=None) -> GeneratorWorker:
    """The generation stage worker + model hot reload. `k4d serve generator --worker` calls
    it through `GeneratorService.build_worker` with the process's one manager and start-up
    load; called alone (entry point k4d.workers, tests) it builds a manager of its own."""
    settings = current_settings().generator
    manager = manager or ModelManager(store, cache_dir=settings.cache_dir or None,
                                      device=settings.device)
    stage = GenerationStage(bus, store, manager,
                            served_model=startup.model if startup is not None else "")
    reload_group = f"{GROUP_ID}-reload-{socket.gethostname()}-{os.getpid()}"
    return GeneratorWorker(
        StageWorker.for_stage(config, bus, store, SIM_PROJECTED, GROUP_ID, stage=STAGE,
                              event_type=events_pb2.ProjectionCompleted, handle=stage.handle,
                              permanent_errors=(*PERMANENT_ERRORS, FailedPrecondition)),
        StageWorker.from_config(config, bus, MODEL_PUBLISHED, reload_group,
                                ModelReloader(manager).handle),
        startup)
