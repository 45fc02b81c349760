"""Prometheus view of the JobTable, computed at scrape time (no counters to keep in sync)."""

from __future__ import annotations

from k4d_simulator.jobs import JobTable
from kinema4d.v1 import simulator_pb2
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class JobTableCollector:
    """k4d_simulator_jobs{state} and k4d_simulator_ignored_terminal_events_total."""

    def __init__(self, table: JobTable):
        self.table = table

    def collect(self):
        jobs = GaugeMetricFamily("k4d_simulator_jobs", "Jobs known to this simulator, by state",
                                 labels=["state"])
        for state, count in sorted(self.table.state_counts().items()):
            name = simulator_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()
            jobs.add_metric([name], count)
        yield jobs
        yield CounterMetricFamily(
            "k4d_simulator_ignored_terminal_events",
            "Terminal events that changed nothing (redelivered completions, late failures)",
            value=self.table.ignored_terminal_events())
