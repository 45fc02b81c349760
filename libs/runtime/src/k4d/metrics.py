"""Prometheus metric families of the runtime, created once per registry."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


@dataclass(frozen=True)
class RuntimeMetrics:
    rpc_requests: Counter       # labels: method, code
    rpc_latency: Histogram      # labels: method
    stage_messages: Counter     # labels: topic, outcome (ok|retry|dlq)
    stage_latency: Histogram    # labels: topic


@functools.cache
def runtime_metrics(registry: CollectorRegistry = REGISTRY) -> RuntimeMetrics:
    return RuntimeMetrics(
        rpc_requests=Counter("k4d_grpc_requests", "gRPC requests handled",
                             ["method", "code"], registry=registry),
        rpc_latency=Histogram("k4d_grpc_request_seconds", "gRPC handling time",
                              ["method"], buckets=_LATENCY_BUCKETS, registry=registry),
        stage_messages=Counter("k4d_stage_messages", "Bus messages handled by stage workers",
                               ["topic", "outcome"], registry=registry),
        stage_latency=Histogram("k4d_stage_message_seconds", "Stage handler time per message",
                                ["topic"], buckets=_LATENCY_BUCKETS, registry=registry),
    )
