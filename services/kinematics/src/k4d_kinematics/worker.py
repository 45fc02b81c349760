"""Kafka stage `k4d.sim.requested` -> kinematics -> `k4d.sim.kinematics`.

For each SimulationRequested: skip a cancelled job (marker `jobs/<id>/cancel`, ADR 000:
emit SimulationFailed{CANCELLED}), load the robot, turn the actions into a joint
trajectory and link poses, store both at deterministic keys
`jobs/<id>/kinematics/{joints,poses}` and publish KinematicsCompleted. A redelivered
event rewrites the same bytes. Bad input raises InvalidArgument/NotFound, which the
StageWorker sends to the dead-letter topic at once (the simulator reports the job failed).
"""

from __future__ import annotations

import time

from k4d.action_proto import action_spec_from_proto
from k4d.bus import StageWorker
from k4d.bus.topics import SIM_KINEMATICS, SIM_REQUESTED
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import RobotRegistry
from k4d.stage_events import (
    is_cancelled,
    publish_cancelled,
    publish_stage_event,
    read_stage_event,
)
from k4d.store import from_tensor_data, job_key, put_array
from kinema4d.v1 import events_pb2

from .proto_actions import ik_options
from .trajectory import solve_actions

STAGE = "kinematics"
GROUP_ID = "k4d-kinematics"


class KinematicsStage:
    def __init__(self, bus, store, registry: RobotRegistry | None = None):
        self.bus, self.store = bus, store
        self.registry = registry or RobotRegistry(store)

    def handle(self, message) -> None:
        started = time.perf_counter()
        request, context = read_stage_event(message, events_pb2.SimulationRequested, STAGE)
        job_id = context.job_id
        if is_cancelled(self.store, job_id):
            publish_cancelled(self.bus, context)
            return
        spec = request.spec
        model = robot_from_ref(spec.robot, self.registry, field="spec.robot")
        actions = action_spec_from_proto(spec.actions, spec.num_frames, spec.clip_to_limits,
                                         self._read, field="spec.actions")
        result = solve_actions(model, actions, ik_options(None, actions.num_frames))
        joints = put_array(self.store, job_key(job_id, STAGE, "joints"), result.joints)
        poses = put_array(self.store, job_key(job_id, STAGE, "poses"), result.poses)
        event = events_pb2.KinematicsCompleted(
            spec=spec, joint_names=model.joint_names, link_names=model.link_names,
            joints=joints.to_proto(), poses=poses.to_proto(),
            failed_frames=int((~result.success).sum()), seconds=time.perf_counter() - started)
        publish_stage_event(self.bus, SIM_KINEMATICS, context, event)

    def _read(self, msg, field: str, max_elements: int):
        return from_tensor_data(msg, self.store, field, max_elements)


def build_worker(config, bus, store) -> StageWorker:
    """Entry point `k4d.workers`: the kinematics stage worker."""
    stage = KinematicsStage(bus, store)
    return StageWorker.from_config(config, bus, SIM_REQUESTED, GROUP_ID, stage.handle)
