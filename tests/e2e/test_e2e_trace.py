"""One trace id across every stage of a job.

Spans can only be captured in memory inside one process, so this variant runs the three
stage workers (their real `k4d.workers` entry points) and the SimulatorService as threads
of the test process, against a real broker of its own and the real S3 server; the
subprocess cluster of the other e2e tests cannot export spans to this process."""

from __future__ import annotations

import threading
import time
from importlib.metadata import entry_points
from pathlib import Path

import grpc
import pytest
from k4d import local_servers
from k4d.bus.kafka import KafkaBus
from k4d.config import load_config
from k4d.grpc_server import create_server
from k4d.store.s3 import S3Store
from k4d_embedded.testing.localcluster import STAGE_SERVICES, example_spec, wait_terminal
from k4d_simulator.server import build_servicer
from kinema4d.v1 import simulator_pb2, simulator_pb2_grpc

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "panda_pick"


@pytest.fixture
def own_broker(tmp_path):
    broker = local_servers.start_broker(log_dir=tmp_path / "broker")
    yield broker.address
    broker.stop()


def test_one_trace_id_from_submit_through_every_stage(own_broker, s3_server, tiny_model,
                                                      span_exporter, tmp_path):
    bucket = f"k4d-trace-{time.monotonic_ns()}"
    config = load_config(
        env={}, grpc_host="127.0.0.1", grpc_port=0, metrics_port=0, kafka_bootstrap=own_broker,
        kafka_session_timeout_ms=3000, kafka_max_poll_interval_ms=60000,
        store_uri=f"s3://{bucket}", s3_endpoint=s3_server.endpoint,
        s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key,
        s3_region=s3_server.region, worker_backoff_s=0.1)
    workers_available = {ep.name: ep for ep in entry_points(group="k4d.workers")}
    missing = [s for s in STAGE_SERVICES if s not in workers_available]
    assert not missing, f"stage workers not installed (entry point group k4d.workers): {missing}"

    stop, threads, closers = threading.Event(), [], []
    for name in STAGE_SERVICES:
        bus = KafkaBus.from_config(config)
        store = S3Store.from_uri(config.store_uri, config)
        worker = workers_available[name].load()(config, bus, store)
        threads.append(threading.Thread(target=worker.run, args=(stop,), daemon=True))
        closers += [bus.close, store.close]
    servicer, feed = build_servicer(config)

    def register(server, _config):
        simulator_pb2_grpc.add_SimulatorServiceServicer_to_server(servicer, server)
        return ["kinema4d.v1.SimulatorService"]

    server, port = create_server(config, [register])
    server.start()
    for thread in threads:
        thread.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = simulator_pb2_grpc.SimulatorServiceStub(channel)
            job_id = stub.Submit(simulator_pb2.SubmitRequest(
                spec=example_spec(EXAMPLE, tiny_model))).job_id
            job = wait_terminal(stub, [job_id], timeout_s=180)[job_id]
        assert job.state == simulator_pb2.JOB_STATE_SUCCEEDED, job
    finally:
        stop.set()
        server.stop(0)
        feed.stop()
        servicer.bus.close()
        servicer.store.close()
        for thread in threads:
            thread.join(15)
        for close in closers:
            close()

    spans = span_exporter.get_finished_spans()
    submit = [s for s in spans if s.name.endswith("SimulatorService/Submit")]
    assert len(submit) == 1, [s.name for s in spans]
    trace_id = submit[0].context.trace_id
    stage_spans = [s for s in spans if s.attributes.get("k4d.job_id") == job_id]
    topics = {s.attributes.get("messaging.destination.name") for s in stage_spans}
    assert {"k4d.sim.requested", "k4d.sim.kinematics", "k4d.sim.projected"} <= topics, topics
    assert {s.context.trace_id for s in stage_spans} == {trace_id}
