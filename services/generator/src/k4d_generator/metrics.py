"""Prometheus metrics of the generator process (its one ModelManager)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

_LOAD_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800)


@dataclass(frozen=True)
class GeneratorMetrics:
    model_loads: Counter        # labels: backend, outcome (ok|error)
    model_load_seconds: Histogram  # labels: backend (load + warm-up of a successful load)


@functools.cache
def generator_metrics(registry: CollectorRegistry = REGISTRY) -> GeneratorMetrics:
    return GeneratorMetrics(
        model_loads=Counter("k4d_generator_model_loads",
                            "Model loads of this generator process (start-up, LoadModel, hot "
                            "reload, a job's model), by outcome", ["backend", "outcome"],
                            registry=registry),
        model_load_seconds=Histogram("k4d_generator_model_load_seconds",
                                     "Time to load and warm up a model", ["backend"],
                                     buckets=_LOAD_BUCKETS, registry=registry),
    )
