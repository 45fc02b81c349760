"""`k4d serve trainer`: registers TrainerService (entry point group k4d.services)."""

from __future__ import annotations

from k4d.bus import open_bus
from k4d.grpc_server import add_shutdown_callback
from k4d.store import open_store
from kinema4d.v1 import trainer_pb2, trainer_pb2_grpc

from k4d_trainer.control.api import TrainerServicer

SERVICE_NAME = trainer_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name


def register_service(server, config, bus=None, store=None) -> list[str]:
    """Entry point: add the servicer; returns its full name. `bus` and `store` are
    injectable for tests (defaults: K4D_KAFKA_BOOTSTRAP / K4D_STORE_URI)."""
    owned = []
    if bus is None:
        bus = open_bus(config)
        owned.append(bus)
    if store is None:
        store = open_store(config=config)
        owned.append(store)
    trainer_pb2_grpc.add_TrainerServiceServicer_to_server(TrainerServicer(bus, store), server)
    for resource in owned:
        add_shutdown_callback(server, resource.close)
    return [SERVICE_NAME]
