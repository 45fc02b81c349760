"""Prometheus view of the JobTable, computed at scrape time (no counters to keep in sync).

One collector per process on the default registry, over every live table (a process
normally serves one; tests run several replicas in one process)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kinema4d.v1 import simulator_pb2
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from k4d_simulator.jobs import JobTable


class JobTableCollector:
    """k4d_simulator_jobs{state} and k4d_simulator_ignored_terminal_events_total, summed
    over `tables`."""

    def __init__(self, *tables: JobTable):
        self.tables: list[JobTable] = list(tables)

    def collect(self):
        jobs = GaugeMetricFamily("k4d_simulator_jobs", "Jobs known to this simulator, by state",
                                 labels=["state"])
        totals: dict[int, int] = {}
        for table in list(self.tables):
            for state, count in table.state_counts().items():
                totals[state] = totals.get(state, 0) + count
        for state, count in sorted(totals.items()):
            name = simulator_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()
            jobs.add_metric([name], count)
        yield jobs
        yield CounterMetricFamily(
            "k4d_simulator_ignored_terminal_events",
            "Terminal events that changed nothing (redelivered completions, late failures)",
            value=sum(t.ignored_terminal_events() for t in list(self.tables)))


_lock = threading.Lock()
_process_collector: JobTableCollector | None = None


def register_table(table: JobTable) -> Callable[[], None]:
    """Count `table` in the process's collector (registered on first use); returns the
    function that stops counting it."""
    global _process_collector
    from prometheus_client import REGISTRY

    with _lock:
        if _process_collector is None:
            _process_collector = JobTableCollector()
            REGISTRY.register(_process_collector)
        collector = _process_collector
        collector.tables.append(table)

    def unregister() -> None:
        with _lock:
            if table in collector.tables:
                collector.tables.remove(table)

    return unregister
