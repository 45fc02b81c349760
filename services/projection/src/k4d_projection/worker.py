"""Kafka stage `k4d.sim.kinematics` -> projection -> `k4d.sim.projected`.

For each KinematicsCompleted: skip a cancelled job (marker `jobs/<id>/cancel`: emit
SimulationFailed{CANCELLED}), load the link poses from the object store, ray-cast the
robot into the job's camera and store depth, pointmap, mask, link_id and rgb at the
deterministic keys `jobs/<id>/projection/<name>`, then publish ProjectionCompleted. A
redelivered event rewrites the same bytes. Bad input raises InvalidArgument/NotFound,
which the StageWorker sends to the dead-letter topic at once.
"""

from __future__ import annotations

import time

from k4d.bus import StageWorker
from k4d.bus.topics import SIM_KINEMATICS, SIM_PROJECTED
from k4d.camera_proto import camera_from_proto
from k4d.errors import InvalidArgument
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import RobotRegistry
from k4d.stage_events import (
    is_cancelled,
    publish_cancelled,
    publish_stage_event,
    read_stage_event,
)
from k4d.store import get_array, job_key, put_array
from k4d.tensor_io import TensorRef
from kinema4d.v1 import events_pb2

from k4d_projection.api import RendererCache
from k4d_projection.renderer import (
    CONDITION_OUTPUTS,
    DEFAULT_MEMORY_BUDGET_BYTES,
    RenderWorkspace,
)

STAGE = "projection"
GROUP_ID = "k4d-projection"


class ProjectionStage:
    def __init__(self, bus, store, renderers: RendererCache | None = None,
                 memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES):
        self.bus, self.store = bus, store
        self.registry = RobotRegistry(store)
        self.renderers = renderers or RendererCache()
        self.memory_budget_bytes = memory_budget_bytes
        self.workspace = RenderWorkspace()  # one message at a time: reuse the buffers

    def handle(self, message) -> None:
        started = time.perf_counter()
        event, context = read_stage_event(message, events_pb2.KinematicsCompleted, STAGE)
        job_id = context.job_id
        if is_cancelled(self.store, job_id):
            publish_cancelled(self.bus, context)
            return
        model = robot_from_ref(event.spec.robot, self.registry, "spec.robot")
        camera = camera_from_proto(event.spec.camera, "spec.camera")
        poses = get_array(self.store, TensorRef.from_proto(event.poses, "poses"), field="poses")
        if list(event.link_names) and list(event.link_names) != model.link_names:
            raise InvalidArgument.for_field("link_names", "do not match the robot's links")
        renderer = self.renderers.get(model, collision=False)
        result = renderer.render(poses, camera, outputs=CONDITION_OUTPUTS,
                                 memory_budget_bytes=self.memory_budget_bytes,
                                 workspace=self.workspace)
        refs = {name: put_array(self.store, job_key(job_id, STAGE, name), array).to_proto()
                for name, array in result.arrays().items()}
        done = events_pb2.ProjectionCompleted(spec=event.spec, joints=event.joints,
                                              poses=event.poses, **refs)
        done.stage_seconds["kinematics"] = event.seconds
        done.stage_seconds[STAGE] = time.perf_counter() - started
        publish_stage_event(self.bus, SIM_PROJECTED, context, done)


def build_worker(config, bus, store) -> StageWorker:
    """Entry point `k4d.workers`: the projection stage worker."""
    stage = ProjectionStage(bus, store)
    return StageWorker.from_config(config, bus, SIM_KINEMATICS, GROUP_ID, stage.handle)
