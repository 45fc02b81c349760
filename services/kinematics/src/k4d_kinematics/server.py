"""`k4d serve kinematics`: registers KinematicsService (entry point group k4d.services)."""

from __future__ import annotations

from k4d.store import open_store
from kinema4d.v1 import kinematics_pb2, kinematics_pb2_grpc

from .api import KinematicsServicer

SERVICE_NAME = kinematics_pb2.DESCRIPTOR.services_by_name["KinematicsService"].full_name


def register_service(server, config, store=None) -> list[str]:
    servicer = KinematicsServicer(store or open_store(config=config),
                                  inline_limit_bytes=config.inline_limit_bytes)
    kinematics_pb2_grpc.add_KinematicsServiceServicer_to_server(servicer, server)
    return [SERVICE_NAME]
