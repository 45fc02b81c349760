"""Prometheus metrics of the trainer's control plane (served on the process's /metrics):
runs launched (first start or resume), jobs finished by state, runs being followed."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge


@dataclass(frozen=True)
class TrainerMetrics:
    launches: Counter  # labels: launcher (local|kubernetes), resume (true|false)
    finished: Counter  # labels: state (succeeded|failed|cancelled)
    followed: Gauge    # runs this worker follows now


@functools.cache
def trainer_metrics(registry: CollectorRegistry = REGISTRY) -> TrainerMetrics:
    return TrainerMetrics(
        launches=Counter("k4d_trainer_launches", "Training runs started by the trainer worker",
                         ["launcher", "resume"], registry=registry),
        finished=Counter("k4d_trainer_jobs_finished", "Training jobs that reached a final state "
                         "(recorded by this process)", ["state"], registry=registry),
        followed=Gauge("k4d_trainer_runs_followed", "Training runs the worker follows now",
                       registry=registry))
