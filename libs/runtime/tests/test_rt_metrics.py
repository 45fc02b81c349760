"""Queue time and compute time apart (Triton's manner), read back from the Prometheus
registry: per RPC through the metrics interceptor of a real loopback server (unary and
streaming, work in a thread started in the RPC's context), per stage message through the
StageWorker on the in-process bus (time in the topic + waits inside the handler)."""

from __future__ import annotations

import contextvars
import threading
import time

import grpc
import pytest
from k4d.bus import InProcessBus, event_headers
from k4d.bus.stage_events import read_stage_event
from k4d.config import load_config
from k4d.grpc_server import create_server
from k4d.metrics import waiting
from kinema4d.v1 import events_pb2
from prometheus_client import REGISTRY

SERVICE = "k4d.test.Metrics"
HOLD_S, WORK_S = 0.6, 0.15


def _sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Gate:
    """A lock the test holds for HOLD_S, as another request holding the sampling lock."""

    def __init__(self):
        self.lock = threading.Lock()

    def hold(self) -> None:
        self.lock.acquire()
        threading.Timer(HOLD_S, self.lock.release).start()

    def pass_through(self) -> None:
        with waiting():
            self.lock.acquire()
        self.lock.release()


@pytest.fixture
def stub():
    gate = Gate()

    def unary(request, context):
        gate.pass_through()
        _busy(WORK_S)
        return request

    def streaming(request, context):
        done = threading.Event()

        def work():  # like GeneratorServicer.Generate: the lock is taken in a thread
            gate.pass_through()
            _busy(WORK_S)
            done.set()

        threading.Thread(target=contextvars.copy_context().run, args=(work,)).start()
        done.wait(30)
        yield request

    handlers = {"Unary": grpc.unary_unary_rpc_method_handler(unary),
                "Stream": grpc.unary_stream_rpc_method_handler(streaming)}
    config = load_config(env={}, grpc_host="127.0.0.1", grpc_port=0)

    def register(server, _config):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE,
                                                                              handlers),))
        return [SERVICE]

    server, port = create_server(config, [register])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield gate, channel
    channel.close()
    server.stop(0)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["Unary", "Stream"])
def test_rt_rpc_queue_and_compute_time_apart(stub, kind):
    gate, channel = stub
    method = f"/{SERVICE}/{kind}"
    before = {name: _sample(f"k4d_grpc_{name}_seconds_sum", method=method)
              for name in ("queue", "compute", "request")}
    gate.hold()
    started = time.perf_counter()
    if kind == "Unary":
        channel.unary_unary(method)(b"x", timeout=30)
    else:
        list(channel.unary_stream(method)(b"x", timeout=30))
    elapsed = time.perf_counter() - started
    got = {name: _sample(f"k4d_grpc_{name}_seconds_sum", method=method) - before[name]
           for name in before}
    assert _sample("k4d_grpc_queue_seconds_count", method=method) >= 1
    assert got["queue"] >= HOLD_S * 0.8, got
    assert WORK_S * 0.9 <= got["compute"] < HOLD_S, got  # the wait is not compute
    assert got["queue"] + got["compute"] <= elapsed + 0.01, (got, elapsed)


def test_rt_stage_queue_time_is_topic_wait_plus_handler_waits():
    topic = "k4d.test.metrics"
    bus, gate = InProcessBus(), Gate()
    from k4d.bus import StageWorker

    def handler(message):
        read_stage_event(message, events_pb2.KinematicsCompleted, "test")
        gate.pass_through()
        _busy(WORK_S)

    event = events_pb2.KinematicsCompleted(header=events_pb2.EventHeader(job_id="job-1"))
    event.header.created_at.FromNanoseconds(time.time_ns() - 2_000_000_000)  # 2 s in the topic
    bus.ensure_topics([topic])
    bus.publish(topic, "job-1", event.SerializeToString(), event_headers("job-1"))
    worker = StageWorker(bus, topic, "test-metrics", handler)
    before = {name: _sample(f"k4d_stage_{name}_seconds_sum", topic=topic)
              for name in ("queue", "compute")}
    gate.hold()
    with bus.consumer([topic], "test-metrics") as consumer:
        (message,) = consumer.poll(5.0)
        assert worker.process(consumer, message, threading.Event()) == "ok"
    got = {name: _sample(f"k4d_stage_{name}_seconds_sum", topic=topic) - before[name]
           for name in before}
    assert got["queue"] >= 2.0 + HOLD_S * 0.8, got
    assert WORK_S * 0.9 <= got["compute"] < HOLD_S, got
    assert _sample("k4d_stage_compute_seconds_count", topic=topic) == 1
