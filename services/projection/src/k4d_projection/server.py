"""`k4d serve projection`: registers ProjectionService (entry point group k4d.services)."""

from __future__ import annotations

from k4d.store import open_store
from kinema4d.v1 import projection_pb2, projection_pb2_grpc

from k4d_projection.api import ProjectionServicer

SERVICE_NAME = projection_pb2.DESCRIPTOR.services_by_name["ProjectionService"].full_name


def register_service(server, config, store=None) -> list[str]:
    servicer = ProjectionServicer(store or open_store(config=config),
                                  inline_limit_bytes=config.inline_limit_bytes)
    projection_pb2_grpc.add_ProjectionServiceServicer_to_server(servicer, server)
    return [SERVICE_NAME]
