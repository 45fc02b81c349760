"""Kafka stage `k4d.sim.requested` -> kinematics -> `k4d.sim.kinematics`.

`StageWorker.for_stage` runs the prologue every stage shares (read the event, skip a
cancelled job: ADR 000, SimulationFailed{CANCELLED}); for each SimulationRequested this
stage decodes the robot and the actions, runs the kinematics core
(`k4d_kinematics.core.run_kinematics`: joint trajectory and link poses), stores both at
deterministic keys `jobs/<id>/kinematics/{joints,poses}` and publishes
KinematicsCompleted. A redelivered event rewrites the same bytes. Bad input raises
InvalidArgument/NotFound, which the StageWorker sends to the dead-letter topic at once
(the simulator reports the job failed).
"""

from __future__ import annotations

import time

from k4d.action_proto import action_spec_from_proto
from k4d.bus import StageWorker
from k4d.bus.stage_events import StageContext, publish_stage_event
from k4d.bus.topics import SIM_KINEMATICS, SIM_REQUESTED
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import RobotRegistry
from k4d.store import from_tensor_data, job_key, put_array
from kinema4d.v1 import events_pb2

from .core import run_kinematics

STAGE = "kinematics"
GROUP_ID = "k4d-kinematics"


class KinematicsStage:
    def __init__(self, bus, store, registry: RobotRegistry | None = None):
        self.bus, self.store = bus, store
        self.registry = registry or RobotRegistry(store)

    def handle(self, request: events_pb2.SimulationRequested, context: StageContext) -> None:
        started = time.perf_counter()
        # decode
        spec = request.spec
        model = robot_from_ref(spec.robot, self.registry, field="spec.robot")
        actions = action_spec_from_proto(spec.actions, spec.num_frames, spec.clip_to_limits,
                                         self._read, field="spec.actions")
        # core
        out = run_kinematics(model, actions)
        # encode
        joints = put_array(self.store, job_key(context.job_id, STAGE, "joints"), out.joints)
        poses = put_array(self.store, job_key(context.job_id, STAGE, "poses"), out.poses)
        event = events_pb2.KinematicsCompleted(
            spec=spec, joint_names=out.joint_names, link_names=out.link_names,
            joints=joints.to_proto(), poses=poses.to_proto(), failed_frames=out.failed_frames,
            seconds=time.perf_counter() - started)
        publish_stage_event(self.bus, SIM_KINEMATICS, context, event)

    def _read(self, msg, field: str, max_elements: int):
        return from_tensor_data(msg, self.store, field, max_elements)


def build_worker(config, bus, store) -> StageWorker:
    """Entry point `k4d.workers`: the kinematics stage worker."""
    stage = KinematicsStage(bus, store)
    return StageWorker.for_stage(config, bus, store, SIM_REQUESTED, GROUP_ID, stage=STAGE,
                                 event_type=events_pb2.SimulationRequested, handle=stage.handle)
