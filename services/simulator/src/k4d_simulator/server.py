"""`k4d serve simulator`: the SimulatorService plus its JobFeed (entry point k4d.services).

Readiness: the service is NOT_SERVING until the feed has loaded the durable job records
and replayed the topics up to the end offsets they had at start, so a replica (the prod
overlay runs several) never answers NOT_FOUND for a job it has not folded yet. On SIGTERM
`serve` stops the feed and closes the bus and store clients (a shutdown callback).
"""

from __future__ import annotations

import re

from k4d.bus import open_bus
from k4d.errors import InvalidArgument
from k4d.grpc_server import add_shutdown_callback, set_serving
from k4d.settings import current as current_settings
from k4d.store import open_store
from kinema4d.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc

from k4d_simulator.api import SimulatorServicer
from k4d_simulator.feed import JobFeed
from k4d_simulator.jobs import JobTable
from k4d_simulator.records import JobRecords

SERVICE_NAME = simulator_pb2.DESCRIPTOR.services_by_name["SimulatorService"].full_name
DEFAULT_MODEL_ENV = "K4D_SIMULATOR_DEFAULT_MODEL"
_REGISTRY_REF = re.compile(r"^(?:registry:)?([A-Za-z0-9][A-Za-z0-9._-]{0,99})"
                           r"(?:/([A-Za-z0-9][A-Za-z0-9._-]{0,99}))?$")


def default_model_ref(value: str) -> common_pb2.ModelRef | None:
    """$K4D_SIMULATOR_DEFAULT_MODEL (`[registry:]NAME[/VERSION]`; empty = none) as the
    ModelRef a spec without a model gets."""
    value = value.strip()
    if not value:
        return None
    match = _REGISTRY_REF.match(value)
    if not match:
        raise InvalidArgument.for_field(DEFAULT_MODEL_ENV, f"expected [registry:]NAME[/VERSION], "
                                                           f"got {value[:200]!r}")
    return common_pb2.ModelRef(name=match[1], version=match[2] or "")


def build_servicer(config, bus=None, store=None, *,
                   on_ready=None) -> tuple[SimulatorServicer, JobFeed]:
    """The servicer and its started feed (own bus/store from config unless given)."""
    default_model = default_model_ref(current_settings().simulator.default_model)
    bus = bus or open_bus(config)
    store = store or open_store(config=config)
    table, records = JobTable(), JobRecords(store)
    feed = JobFeed(bus, table, records, on_ready=on_ready).start()
    return SimulatorServicer(bus, store, table, records, default_model=default_model), feed


def register_service(server, config) -> list[str]:
    from k4d_simulator.metrics import register_table

    set_serving(server, SERVICE_NAME, False)

    def on_ready() -> None:
        set_serving(server, SERVICE_NAME, True)

    servicer, feed = build_servicer(config, on_ready=on_ready)
    unregister = register_table(servicer.table)  # served on the process's /metrics

    def stop() -> None:
        feed.stop()
        unregister()
        servicer.bus.close()
        servicer.store.close()

    add_shutdown_callback(server, stop)
    simulator_pb2_grpc.add_SimulatorServiceServicer_to_server(servicer, server)
    return [SERVICE_NAME]
