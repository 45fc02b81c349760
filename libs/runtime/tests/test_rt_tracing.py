"""One trace across a gRPC call and a bus hop (the W3C traceparent header)."""

import threading

import grpc
import pytest
from k4d.bus import InProcessBus, StageWorker, event_headers
from k4d.config import load_config
from k4d.grpc_client import create_channel
from k4d.grpc_server import create_server

SERVICE = "k4d.test.Submit"


def _run_hop(bus, span_exporter, topic):
    """gRPC Submit -> handler publishes to `topic` -> StageWorker consumes it."""
    def submit(request, context):
        bus.publish(topic, "job-t", request, event_headers("job-t"))
        return b"accepted"

    def register(server, config):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE, {"Submit": grpc.unary_unary_rpc_method_handler(submit)}),))
        return [SERVICE]

    server, port = create_server(load_config(env={}, grpc_host="127.0.0.1", grpc_port=0), [register])
    server.start()
    handled, stop = threading.Event(), threading.Event()
    worker = StageWorker(bus, topic, f"{topic}-group", lambda m: handled.set(), poll_timeout_s=0.2)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        with create_channel(f"127.0.0.1:{port}") as channel:
            assert channel.unary_unary(f"/{SERVICE}/Submit")(b"job", timeout=10) == b"accepted"
        assert handled.wait(30)
    finally:
        stop.set()
        thread.join(15)
        server.stop(None)

    spans = span_exporter.get_finished_spans()
    client = next(s for s in spans if s.kind.name == "CLIENT" and s.name == f"{SERVICE}/Submit")
    rpc = next(s for s in spans if s.kind.name == "SERVER" and s.name == f"{SERVICE}/Submit")
    publish = next(s for s in spans if s.kind.name == "PRODUCER" and s.name == f"{topic} publish")
    process = next(s for s in spans if s.kind.name == "CONSUMER" and s.name == f"{topic} process")
    assert {s.context.trace_id for s in (client, rpc, publish, process)} == {client.context.trace_id}
    assert rpc.parent.span_id == client.context.span_id
    assert publish.parent.span_id == rpc.context.span_id
    assert process.parent.span_id == publish.context.span_id
    assert process.attributes["k4d.job_id"] == "job-t"


def test_one_trace_across_grpc_and_in_process_bus(span_exporter):
    _run_hop(InProcessBus(), span_exporter, "k4d.test.trace.mem")


@pytest.mark.integration
def test_one_trace_across_grpc_and_kafka(kafka_bus, span_exporter):
    _run_hop(kafka_bus, span_exporter, "k4d.test.trace.kafka")
