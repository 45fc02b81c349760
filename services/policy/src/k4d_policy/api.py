"""`PolicyServicer`: a built-in policy behind PolicyService (thin: validate, call, map).

Each episode gets its own policy object (the reference policies keep per-episode state);
the newest MAX_EPISODES episodes are kept, so a client that never finishes cannot grow the
server without bound. Bad input is INVALID_ARGUMENT with field violations; Act on an
unknown episode is FAILED_PRECONDITION; errors never take the server down.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np
from k4d.camera_proto import camera_violations
from k4d.errors import FailedPrecondition, FieldViolation, InvalidArgument
from k4d.tensor_io import to_tensor
from kinema4d.v1 import kinematics_pb2, policy_pb2, policy_pb2_grpc

from k4d_policy.remote import context_from_proto, observation_from_proto

MAX_EPISODES = 64
MAX_STEPS = 10_000


def _observation_violations(msg, field: str, joints: int | None) -> list[FieldViolation]:
    from k4d.tensor_io import validate_array

    out = []
    try:
        obs = observation_from_proto(msg, field)
        dims: dict = {}
        validate_array(obs.rgb, f"{field}.rgb", dtype="uint8", shape=("H", "W", 3), dims=dims)
        validate_array(obs.pointmap, f"{field}.pointmap", dtype="float32", shape=("H", "W", 3), dims=dims)
        if not np.isfinite(obs.pointmap).all():
            out.append(FieldViolation(f"{field}.pointmap", "has NaN or inf values"))
    except InvalidArgument as exc:
        return list(exc.violations)
    if joints is not None and len(msg.joint_positions) != joints:
        out.append(FieldViolation(f"{field}.joint_positions",
                                  f"{len(msg.joint_positions)} values for {joints} joint names"))
    if not all(math.isfinite(v) for v in msg.joint_positions):
        out.append(FieldViolation(f"{field}.joint_positions", "has NaN or inf values"))
    return out


def reset_violations(request) -> list[FieldViolation]:
    v = []
    if not request.episode_id:
        v.append(FieldViolation("episode_id", "required"))
    if not request.task:
        v.append(FieldViolation("task", "required"))
    if not request.robot.name:
        v.append(FieldViolation("robot.name", "required (a builtin robot, e.g. panda)"))
    if not request.joint_names:
        v.append(FieldViolation("joint_names", "required"))
    if not (math.isfinite(request.dt_s) and request.dt_s > 0):
        v.append(FieldViolation("dt_s", f"must be a finite number > 0, got {request.dt_s}"))
    for name in ("chunk_length", "horizon"):
        value = getattr(request, name)
        if not 1 <= value <= MAX_STEPS:
            v.append(FieldViolation(name, f"must be in [1, {MAX_STEPS}], got {value}"))
    v.extend(camera_violations(request.camera, "camera"))
    v.extend(_observation_violations(request.observation, "observation", len(request.joint_names)))
    return v


class PolicyServicer(policy_pb2_grpc.PolicyServiceServicer):
    def __init__(self, factory, name: str):
        self._factory, self.name = factory, name
        self._episodes: OrderedDict[str, tuple[object, int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def Reset(self, request, context):
        violations = reset_violations(request)
        if violations:
            raise InvalidArgument("malformed ResetRequest", violations)
        ctx = context_from_proto(request)
        policy = self._factory()
        policy.reset(ctx)
        with self._lock:
            self._episodes[request.episode_id] = (policy, len(request.joint_names), ctx.chunk_length)
            self._episodes.move_to_end(request.episode_id)
            while len(self._episodes) > MAX_EPISODES:
                self._episodes.popitem(last=False)
        return policy_pb2.ResetResponse(policy_name=self.name)

    def Act(self, request, context):
        with self._lock:
            entry = self._episodes.get(request.episode_id)
        if entry is None:
            raise FailedPrecondition(f"episode {request.episode_id!r} was never Reset (or was dropped: "
                                     f"at most {MAX_EPISODES} episodes are kept)")
        policy, joints, _ = entry
        violations = _observation_violations(request.observation, "observation", joints)
        if violations:
            raise InvalidArgument("malformed ActRequest", violations)
        actions = np.asarray(policy.act(observation_from_proto(request.observation)), np.float64)
        return policy_pb2.ActResponse(action_type=kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS,
                                      actions=to_tensor(actions))
