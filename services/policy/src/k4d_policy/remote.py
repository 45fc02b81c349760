"""The same `Policy` interface over gRPC: `GrpcPolicy("HOST:PORT")` talks to any
PolicyService (ours, `k4d policy serve NAME`, or a user's pod), with a deadline on every
call. Transport failures (unreachable, deadline exceeded, server gone) become
`PolicyUnavailable` naming the address: the evaluation records the episode as not
evaluated, never as a policy failure.

Conversions between the in-process dataclasses and the protobuf messages live here too,
used by both sides (client and `api.PolicyServicer`).
"""

from __future__ import annotations

import numpy as np
from k4d.camera_proto import camera_from_proto, camera_to_proto
from k4d.errors import InvalidArgument
from k4d.tensor_io import from_tensor, to_tensor

from k4d_policy.policies import EpisodeContext, Observation
from k4d_policy.runner import MalformedAction, PolicyUnavailable

GRPC_PREFIX = "grpc://"
DEFAULT_TIMEOUT_S = 30.0
# Transport-level codes: the server could not be reached or did not answer in time.
UNAVAILABLE_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN", "INTERNAL",
                     "RESOURCE_EXHAUSTED", "UNIMPLEMENTED")


def observation_to_proto(obs: Observation):
    from kinema4d.v1 import policy_pb2

    return policy_pb2.Observation(rgb=to_tensor(np.ascontiguousarray(obs.rgb, np.uint8)),
                                  pointmap=to_tensor(np.ascontiguousarray(obs.pointmap, np.float32)),
                                  joint_positions=[float(v) for v in obs.joints], step=int(obs.step))


def observation_from_proto(msg, field: str = "observation") -> Observation:
    return Observation(from_tensor(msg.rgb, f"{field}.rgb"), from_tensor(msg.pointmap, f"{field}.pointmap"),
                       np.asarray(msg.joint_positions, np.float64), int(msg.step))


def context_to_proto(ctx: EpisodeContext):
    from kinema4d.v1 import common_pb2, policy_pb2

    return policy_pb2.ResetRequest(
        episode_id=ctx.episode_id, task=ctx.task, task_kind=ctx.task_kind,
        robot=common_pb2.RobotRef(name=ctx.robot), joint_names=list(ctx.joint_names),
        camera=camera_to_proto(ctx.camera), dt_s=float(ctx.dt_s), chunk_length=int(ctx.chunk_length),
        horizon=int(ctx.horizon), observation=observation_to_proto(ctx.observation), seed=int(ctx.seed))


def context_from_proto(msg) -> EpisodeContext:
    return EpisodeContext(msg.episode_id, msg.task, msg.task_kind, msg.robot.name, list(msg.joint_names),
                          camera_from_proto(msg.camera, "camera"), float(msg.dt_s), int(msg.chunk_length),
                          int(msg.horizon), observation_from_proto(msg.observation), int(msg.seed))


class GrpcPolicy:
    """A PolicyService at `address` ("HOST:PORT" or "grpc://HOST:PORT"), reached with TLS
    and a token as `security` says (a `k4d.grpc_client.ClientSecurity`; default: what
    K4D_TLS_CA and K4D_TOKEN say, as for every client)."""

    def __init__(self, address: str, timeout_s: float = DEFAULT_TIMEOUT_S, security=None):
        from k4d.config import load_config
        from k4d.grpc_client import ClientSecurity, create_channel
        from kinema4d.v1 import policy_pb2_grpc

        self.address = address[len(GRPC_PREFIX):] if address.startswith(GRPC_PREFIX) else address
        self.name = f"{GRPC_PREFIX}{self.address}"
        self.timeout_s = timeout_s
        security = security or ClientSecurity.from_config(load_config())
        self._channel = create_channel(self.address, security=security)
        self._stub = policy_pb2_grpc.PolicyServiceStub(self._channel)
        self._episode = ""

    def _call(self, method: str, request):
        import grpc

        try:
            return getattr(self._stub, method)(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            code = exc.code().name if exc.code() is not None else "UNKNOWN"
            if code == "DEADLINE_EXCEEDED":
                raise PolicyUnavailable(f"policy server {self.address}: no answer to {method} within "
                                        f"{self.timeout_s:g} s") from None
            if code in UNAVAILABLE_CODES:
                raise PolicyUnavailable(f"policy server {self.address}: {method} failed ({code}: "
                                        f"{exc.details()})") from None
            raise PolicyUnavailable(f"policy server {self.address} refused {method} ({code}: "
                                    f"{exc.details()})") from None

    def reset(self, context: EpisodeContext) -> None:
        self._episode = context.episode_id
        reply = self._call("Reset", context_to_proto(context))
        if reply.policy_name:
            self.served_name = reply.policy_name

    def act(self, observation: Observation) -> np.ndarray:
        from kinema4d.v1 import policy_pb2

        reply = self._call("Act", policy_pb2.ActRequest(episode_id=self._episode,
                                                        observation=observation_to_proto(observation)))
        try:
            return from_tensor(reply.actions, "actions")
        except InvalidArgument as exc:  # bytes that do not match dtype/shape: a malformed chunk
            raise MalformedAction(self.name, observation.step, f"undecodable action tensor ({exc})") from None

    def close(self) -> None:
        self._channel.close()


def open_policy(spec: str, timeout_s: float = DEFAULT_TIMEOUT_S):
    """A built-in policy name, or grpc://HOST:PORT."""
    from k4d_policy.policies import make_policy

    if spec.startswith(GRPC_PREFIX):
        return GrpcPolicy(spec, timeout_s)
    return make_policy(spec)
