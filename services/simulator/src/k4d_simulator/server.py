"""`k4d serve simulator`: the SimulatorService plus its JobFeed (entry point k4d.services)."""

from __future__ import annotations

from k4d.bus import open_bus
from k4d.store import open_store
from k4d_simulator.api import SimulatorServicer
from k4d_simulator.feed import JobFeed
from k4d_simulator.jobs import JobTable
from kinema4d.v1 import simulator_pb2, simulator_pb2_grpc

SERVICE_NAME = simulator_pb2.DESCRIPTOR.services_by_name["SimulatorService"].full_name


def build_servicer(config, bus=None, store=None) -> tuple[SimulatorServicer, JobFeed]:
    """The servicer and its started feed (own bus/store from config unless given)."""
    bus = bus or open_bus(config)
    store = store or open_store(config=config)
    table = JobTable()
    feed = JobFeed(bus, table).start()
    return SimulatorServicer(bus, store, table), feed


def register_service(server, config) -> list[str]:
    from k4d_simulator.metrics import JobTableCollector
    from prometheus_client import REGISTRY

    servicer, _feed = build_servicer(config)
    REGISTRY.register(JobTableCollector(servicer.table))  # served on the process's /metrics
    simulator_pb2_grpc.add_SimulatorServiceServicer_to_server(servicer, server)
    return [SERVICE_NAME]
