"""Kafka stage `k4d.sim.projected` -> generation -> `k4d.sim.completed`, plus hot reload
on `k4d.model.published`.

For each ProjectionCompleted: skip a cancelled job (marker `jobs/<id>/cancel`: emit
SimulationFailed{CANCELLED}); load the initial image and the robot condition; sample
with the process's model (`GeneratorService` shares one `ModelManager` between gRPC and
this stage; with no start-up model, a job's model is loaded on first use; an empty
model = the static-world generator),
publishing SimulationProgress per step on `k4d.sim.progress` and checking the cancel
marker between steps; store rgb, pointmap and rgb.mp4 at `jobs/<id>/generation/<name>`;
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
from k4d.bus.topics import (
    MODEL_PUBLISHED,
    SIM_COMPLETED,
    SIM_PROGRESS,
    SIM_PROJECTED,
)
from k4d.bus.worker import PERMANENT_ERRORS
from k4d.errors import Cancelled, FailedPrecondition
from k4d.generation import STATIC_WORLD
from k4d.initial_scene import initial_pointmap
from k4d.logs import get_logger
from k4d.model_events import read_model_published
from k4d.stage_events import (
    is_cancelled,
    publish_cancelled,
    publish_stage_event,
    read_stage_event,
)
from k4d.store import from_tensor_data, get_array, job_key, put_array
from k4d.tensor_io import TensorRef
from kinema4d.v1 import common_pb2, events_pb2, simulator_pb2

from k4d_generator.api import model_info_proto, sampling_kwargs
from k4d_generator.server import generator_settings
from k4d_generator.service import ModelManager, model_ref_string

STAGE = "generation"
GROUP_ID = "k4d-generator"
log = get_logger(__name__)


class GenerationStage:
    def __init__(self, bus, store, manager: ModelManager, served_model: str = ""):
        self.bus, self.store, self.manager = bus, store, manager
        self.served_model = served_model  # the start-up model: the only one served

    def handle(self, message) -> None:
        started = time.perf_counter()
        event, context = read_stage_event(message, events_pb2.ProjectionCompleted, STAGE)
        job_id = context.job_id
        if is_cancelled(self.store, job_id):
            publish_cancelled(self.bus, context)
            return
        spec = event.spec
        image = from_tensor_data(spec.initial_image, self.store, "spec.initial_image")
        robot = {name: get_array(self.store, TensorRef.from_proto(getattr(event, name), name),
                                 field=name) for name in ("rgb", "pointmap", "mask")}
        kwargs = sampling_kwargs(spec.sampling)
        if spec.model.name or spec.model.uri:
            self._ensure_loaded(spec.model, kwargs["backend"], spec.sampling.precision)
        else:
            kwargs["backend"] = STATIC_WORLD
        try:
            result = self.manager.generate(
                image, robot["rgb"], robot["pointmap"], robot["mask"],
                callback=lambda done, total: self._progress(context, done, total),
                should_cancel=lambda: is_cancelled(self.store, job_id),
                initial_pointmap=initial_pointmap(spec, self.store), **kwargs)
        except Cancelled:
            publish_cancelled(self.bus, context)
            return
        outputs = {name: put_array(self.store, job_key(job_id, STAGE, name), array)
                   for name, array in (("rgb", result.rgb), ("pointmap", result.pointmap))}
        video_uri = self._store_video(job_id, result)
        info = result.metadata.get("model") or {"name": STATIC_WORLD, "variant": STATIC_WORLD}
        sim_result = simulator_pb2.SimulationResult(
            rgb=outputs["rgb"].to_proto(), pointmap=outputs["pointmap"].to_proto(),
            robot_pointmap=event.pointmap, robot_mask=event.mask, robot_rgb=event.rgb,
            joints=event.joints, poses=event.poses, rgb_video_uri=video_uri,
            model=model_info_proto({**info, "loaded": True}))
        for stage, seconds in event.stage_seconds.items():
            sim_result.stage_seconds[stage] = seconds
        sim_result.stage_seconds[STAGE] = time.perf_counter() - started
        publish_stage_event(self.bus, SIM_COMPLETED, context,
                            events_pb2.SimulationCompleted(result=sim_result))

    def _ensure_loaded(self, ref: common_pb2.ModelRef, backend: str, precision: str) -> None:
        """The job's model on the job's backend and precision ("" = the loaded one's) is
        the loaded one; else load it, unless this process serves its start-up model only."""
        loaded = self.manager.loaded
        if loaded is not None and backend in ("", loaded.backend) \
                and precision in ("", loaded.precision) \
                and loaded.matches(ref.name, ref.version, ref.uri):
            return
        wanted = model_ref_string(ref.name, ref.version, ref.uri)
        if self.served_model:
            serving = (f"{loaded.ref} on {loaded.backend} {loaded.precision}"
                       if loaded is not None else self.served_model)
            asked = " ".join(x for x in (backend, precision) if x)
            raise FailedPrecondition(
                f"this generator serves {serving[:200]} (K4D_GENERATOR_MODEL); the job asks "
                f"for {wanted[:200]}{' on ' + asked if asked else ''}")
        self.manager.load(wanted, backend or "torch", precision or None)

    def _store_video(self, job_id: str, result) -> str:
        from k4d_generator.outputs import write_video

        with tempfile.TemporaryDirectory() as tmp:
            path = write_video(Path(tmp) / "rgb.mp4", result.rgb, int(result.metadata.get(
                "fps", 24)))
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
    settings = generator_settings()
    manager = manager or ModelManager(store, cache_dir=settings["cache_dir"] or None,
                                      device=settings["device"])
    stage = GenerationStage(bus, store, manager,
                            served_model=startup.model if startup is not None else "")
    reload_group = f"{GROUP_ID}-reload-{socket.gethostname()}-{os.getpid()}"
    return GeneratorWorker(
        StageWorker.from_config(config, bus, SIM_PROJECTED, GROUP_ID, stage.handle,
                                permanent_errors=(*PERMANENT_ERRORS, FailedPrecondition)),
        StageWorker.from_config(config, bus, MODEL_PUBLISHED, reload_group,
                                ModelReloader(manager).handle),
        startup)
