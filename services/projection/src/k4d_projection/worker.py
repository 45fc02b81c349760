"""Kafka stage `k4d.sim.kinematics` -> projection -> `k4d.sim.projected`.

`StageWorker.for_stage` runs the prologue every stage shares (read the event, skip a
cancelled job: SimulationFailed{CANCELLED}); for each KinematicsCompleted this stage
decodes the robot, the camera and the link poses (from the object store), runs the
projection core (`k4d_projection.core.robot_condition`: ray-cast the robot into the
job's camera), stores depth, pointmap, mask, link_id and rgb at the deterministic keys
`jobs/<id>/projection/<name>` and publishes ProjectionCompleted. A redelivered event
rewrites the same bytes. Bad input raises InvalidArgument/NotFound, which the
StageWorker sends to the dead-letter topic at once.
"""

from __future__ import annotations

import time

from k4d.bus import StageWorker
from k4d.bus.stage_events import StageContext, publish_stage_event
from k4d.bus.topics import SIM_KINEMATICS, SIM_PROJECTED
from k4d.camera_proto import camera_from_proto
from k4d.errors import InvalidArgument
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import RobotRegistry
from k4d.store import get_array, job_key, put_array
from k4d.tensor_io import TensorRef
from kinema4d.v1 import events_pb2

from k4d_projection.core import RendererCache, robot_condition
from k4d_projection.renderer import DEFAULT_MEMORY_BUDGET_BYTES, RenderWorkspace

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

    def handle(self, event: events_pb2.KinematicsCompleted, context: StageContext) -> None:
        started = time.perf_counter()
        # decode
        model = robot_from_ref(event.spec.robot, self.registry, "spec.robot")
        camera = camera_from_proto(event.spec.camera, "spec.camera")
        poses = get_array(self.store, TensorRef.from_proto(event.poses, "poses"), field="poses")
        if list(event.link_names) and list(event.link_names) != model.link_names:
            raise InvalidArgument.for_field("link_names", "do not match the robot's links")
        # core
        result = robot_condition(self.renderers.get(model, collision=False), poses, camera,
                                 memory_budget_bytes=self.memory_budget_bytes,
                                 workspace=self.workspace)
        # encode
        refs = {name: put_array(self.store, job_key(context.job_id, STAGE, name), array).to_proto()
                for name, array in result.arrays().items()}
        done = events_pb2.ProjectionCompleted(spec=event.spec, joints=event.joints,
                                              poses=event.poses, **refs)
        done.stage_seconds["kinematics"] = event.seconds
        done.stage_seconds[STAGE] = time.perf_counter() - started
        publish_stage_event(self.bus, SIM_PROJECTED, context, done)


def build_worker(config, bus, store) -> StageWorker:
    """Entry point `k4d.workers`: the projection stage worker."""
    stage = ProjectionStage(bus, store)
    return StageWorker.for_stage(config, bus, store, SIM_KINEMATICS, GROUP_ID, stage=STAGE,
                                 event_type=events_pb2.KinematicsCompleted, handle=stage.handle)
