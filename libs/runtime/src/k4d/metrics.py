"""Prometheus metric families of the runtime, created once per registry, and the queue /
compute split of every request and stage message (in Triton's manner).

Queue time is time a request or message spent waiting before its own work could run:
in the topic before a stage worker took it (`note_queued_since`) and, inside the handler,
waiting for a shared resource such as the generator's sampling lock (`waiting()`).
Compute time is the handler's time minus the waiting inside it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


@dataclass(frozen=True)
class RuntimeMetrics:
    rpc_requests: Counter       # labels: method, code
    rpc_latency: Histogram      # labels: method
    rpc_queue: Histogram        # labels: method
    rpc_compute: Histogram      # labels: method
    stage_messages: Counter     # labels: topic, outcome (ok|retry|dlq)
    stage_latency: Histogram    # labels: topic
    stage_queue: Histogram      # labels: topic
    stage_compute: Histogram    # labels: topic


@functools.cache
def runtime_metrics(registry: CollectorRegistry = REGISTRY) -> RuntimeMetrics:
    def histogram(name: str, doc: str, label: str) -> Histogram:
        return Histogram(name, doc, [label], buckets=_LATENCY_BUCKETS, registry=registry)

    return RuntimeMetrics(
        rpc_requests=Counter("k4d_grpc_requests", "gRPC requests handled",
                             ["method", "code"], registry=registry),
        rpc_latency=histogram("k4d_grpc_request_seconds", "gRPC handling time", "method"),
        rpc_queue=histogram("k4d_grpc_queue_seconds",
                            "Time an RPC waited for a shared resource before its work ran "
                            "(the generator: waiting for the sampling lock)", "method"),
        rpc_compute=histogram("k4d_grpc_compute_seconds",
                              "gRPC handling time minus queue time", "method"),
        stage_messages=Counter("k4d_stage_messages", "Bus messages handled by stage workers",
                               ["topic", "outcome"], registry=registry),
        stage_latency=histogram("k4d_stage_message_seconds", "Stage handler time per message",
                                "topic"),
        stage_queue=histogram("k4d_stage_queue_seconds",
                              "Time a stage message waited: in the topic from its event's "
                              "creation until the stage took it, plus waits for a shared "
                              "resource inside the handler", "topic"),
        stage_compute=histogram("k4d_stage_compute_seconds",
                                "Stage handler time minus the waits inside it", "topic"),
    )


class WorkTiming:
    """Queue time of the request or message handled in the current context."""

    __slots__ = ("started", "queued_before_s", "waited_s")

    def __init__(self):
        self.started = time.perf_counter()
        self.queued_before_s = 0.0  # before the handler ran (in the topic)
        self.waited_s = 0.0  # inside the handler, for a shared resource

    def split(self) -> tuple[float, float]:
        """(queue seconds, compute seconds) up to now."""
        elapsed = time.perf_counter() - self.started
        compute = max(0.0, elapsed - self.waited_s)
        return self.queued_before_s + self.waited_s, compute


_CURRENT: ContextVar[WorkTiming | None] = ContextVar("k4d_work_timing", default=None)


def begin_work() -> tuple[WorkTiming, object]:
    """Start timing a request/message in this context: (timing, token for `end_work`).
    Threads the handler starts see it when run with `contextvars.copy_context().run`."""
    timing = WorkTiming()
    return timing, _CURRENT.set(timing)


def end_work(token) -> None:
    try:
        _CURRENT.reset(token)
    except ValueError:  # reset from another context (a stream finished elsewhere)
        pass


@contextmanager
def waiting() -> Iterator[None]:
    """Time spent in the block counts as queue time of the current request or message
    (e.g. waiting for a lock that serialises work); outside any, it is not recorded."""
    started = time.perf_counter()
    try:
        yield
    finally:
        timing = _CURRENT.get()
        if timing is not None:
            timing.waited_s += time.perf_counter() - started


def note_queued_since(created_unix_s: float) -> None:
    """The current message was created at `created_unix_s` (wall clock): the time until
    its handler started counts as queue time (0 when clocks disagree)."""
    timing = _CURRENT.get()
    if timing is not None and created_unix_s > 0:
        started_unix = time.time() - (time.perf_counter() - timing.started)
        timing.queued_before_s = max(0.0, started_unix - created_unix_s)
