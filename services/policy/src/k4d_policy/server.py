"""`k4d policy serve NAME --port P`: one built-in policy behind PolicyService, with health
and reflection (the runtime's gRPC bootstrap: `create_server` for tests, `serve` for the
process with SIGTERM handling)."""

from __future__ import annotations

from kinema4d.v1 import policy_pb2, policy_pb2_grpc

from k4d_policy.api import PolicyServicer

SERVICE_NAME = policy_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name


def policy_register_fn(name: str):
    """A register function (k4d.grpc_server) serving built-in policy `name`."""
    from k4d_policy.policies import make_policy

    make_policy(name)  # unknown names fail here, before the server starts

    def register(server, config) -> list[str]:
        policy_pb2_grpc.add_PolicyServiceServicer_to_server(
            PolicyServicer(lambda: make_policy(name), name), server)
        return [SERVICE_NAME]

    return register


def create_policy_server(name: str, port: int = 0, host: str = "127.0.0.1"):
    """-> (server, bound port), not started."""
    from k4d.config import load_config
    from k4d.grpc_server import create_server

    config = load_config(grpc_port=port, grpc_host=host, metrics_port=0)
    return create_server(config, [policy_register_fn(name)])
