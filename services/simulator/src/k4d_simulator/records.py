"""Durable job records in the object store: what every front-door replica shares and what
outlives the Kafka topics' retention (docs/adr/ for why the object store).

    simulator/idempotency/<sha256(key)>/<generation>.pb   SimulationRequested, create-once
    simulator/jobs/<job_id>/requested.pb                  SimulationRequested, after publish
    simulator/jobs/<job_id>/final.pb                      the terminal Job, create-once
    simulator/snapshots/<unix ns>.pb                      finished jobs, ListJobsResponse

- Idempotency: the first Submit of a key creates generation N of its object with
  `If-None-Match: *` (`ObjectStore.put_bytes_if_absent`); exactly one replica wins, the
  others read the winner's request. Once a generation is older than the idempotency window
  the next Submit creates generation N + 1, again create-once, so a reused key after the
  window makes exactly one new job too.
- `requested.pb` is written once the request is on the bus: a job is listed from it after
  its topic records have expired, and its presence says the request was published (a key
  object without it, older than PUBLISH_GRACE_S, belongs to a Submit that died between
  its claim and its publish: the next Submit of the key publishes it).
- `final.pb` is written by whichever replica first folds the job into a terminal state;
  create-once, so every replica reads the same final record.
- Snapshots: a replica that had to read many final records one by one at start writes
  them all (with the snapshot it started from) as one object; the next start reads the
  newest snapshot with one GET and only the records it does not hold. Final records never
  change, so a snapshot never goes stale; the two newest are kept.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from k4d.errors import NotFound, Unavailable
from k4d.store import validate_key
from kinema4d.v1 import events_pb2, simulator_pb2

PREFIX = "simulator"
_S = simulator_pb2.JobState
_TERMINAL = frozenset({_S.JOB_STATE_SUCCEEDED, _S.JOB_STATE_FAILED, _S.JOB_STATE_CANCELLED})
# What api.new_job_id makes: sim-<unix seconds hex>-<12 hex>.
JOB_ID = re.compile(r"sim-[0-9a-f]{1,16}-[0-9a-f]{12}")
PUBLISH_GRACE_S = 30.0
LOAD_THREADS = 16
SNAPSHOTS_KEPT = 2
_CLAIM_ATTEMPTS = 8


def _ts_ns(ts) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


class JobRecords:
    """The simulator's records in `store` (an ObjectStore) under `prefix`."""

    def __init__(self, store, prefix: str = PREFIX):
        self.store, self.prefix = store, prefix

    # --- keys ----------------------------------------------------------------------

    def _job_key(self, job_id: str, name: str) -> str:
        return validate_key(f"{self.prefix}/jobs/{job_id}/{name}", "job_id")

    def _key_prefix(self, idempotency_key: str) -> str:
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
        return f"{self.prefix}/idempotency/{digest}/"

    # --- idempotency -----------------------------------------------------------------

    def claim(self, idempotency_key: str, request: events_pb2.SimulationRequested,
              now_ns: int, window_s: float) -> tuple[events_pb2.SimulationRequested, bool]:
        """(the key's request, True) when `request` now owns the key, else (the request
        that owns it within the window, False). Safe across processes."""
        prefix = self._key_prefix(idempotency_key)
        for _ in range(_CLAIM_ATTEMPTS):
            generations = sorted(int(name.rsplit("/", 1)[1].removesuffix(".pb"))
                                 for name in self.store.list(prefix) if name.endswith(".pb"))
            generation = 0
            if generations:
                current = self._request(f"{prefix}{generations[-1]:08d}.pb")
                if current is not None and \
                        now_ns - _ts_ns(current.header.created_at) <= window_s * 1e9:
                    return current, False
                generation = generations[-1] + 1
            if self.store.put_bytes_if_absent(f"{prefix}{generation:08d}.pb",
                                              request.SerializeToString()):
                return request, True
            # Another replica created this generation first: the next pass reads it.
        raise Unavailable(f"idempotency key: no decision after {_CLAIM_ATTEMPTS} attempts")

    def release(self, idempotency_key: str, request: events_pb2.SimulationRequested) -> None:
        """Give a claimed key up (its request could not be published): a retry of the
        same key then makes a new job instead of returning one that never ran."""
        prefix = self._key_prefix(idempotency_key)
        for name in self.store.list(prefix):
            current = self._request(name)
            if current is not None and current.header.job_id == request.header.job_id:
                self.store.delete(name)

    def _request(self, key: str) -> events_pb2.SimulationRequested | None:
        try:
            data = self.store.get_bytes(key)
        except NotFound:
            return None
        request = events_pb2.SimulationRequested()
        request.ParseFromString(data)
        return request

    # --- job records -------------------------------------------------------------------

    def put_requested(self, request: events_pb2.SimulationRequested) -> None:
        self.store.put_bytes(self._job_key(request.header.job_id, "requested.pb"),
                             request.SerializeToString())

    def is_published(self, job_id: str) -> bool:
        return self.store.exists(self._job_key(job_id, "requested.pb"))

    def put_final(self, job: simulator_pb2.Job) -> bool:
        """Record a terminal job; False when a final record existed (it stays)."""
        return self.store.put_bytes_if_absent(self._job_key(job.job_id, "final.pb"),
                                              job.SerializeToString(deterministic=True))

    def load(self, job_id: str) -> tuple[events_pb2.SimulationRequested | None,
                                         simulator_pb2.Job | None]:
        """(None, final job) of a finished job, (request, None) of a recorded unfinished
        one, (None, None) of an unknown id or one no Submit could have made."""
        if not JOB_ID.fullmatch(job_id):  # no store read for what no Submit made
            return None, None
        final_key = self._job_key(job_id, "final.pb")
        try:
            return None, simulator_pb2.Job.FromString(self.store.get_bytes(final_key))
        except NotFound:
            return self._request(self._job_key(job_id, "requested.pb")), None

    def load_all(self) -> tuple[list[simulator_pb2.Job],
                                Iterator[tuple[events_pb2.SimulationRequested | None,
                                               simulator_pb2.Job | None]]]:
        """(the finished jobs of the newest snapshot, every other recorded job as `load`
        gives it, read with LOAD_THREADS parallel GETs)."""
        snapshot = self.newest_snapshot()
        known = {job.job_id for job in snapshot}
        root = f"{self.prefix}/jobs/"
        job_ids = sorted({name[len(root):].split("/", 1)[0] for name in self.store.list(root)}
                         - known)

        def rest():
            with ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="job-records") as pool:
                yield from pool.map(self.load, job_ids)

        return snapshot, rest()

    # --- snapshots -------------------------------------------------------------------

    def _snapshot_names(self) -> list[str]:
        return [n for n in self.store.list(f"{self.prefix}/snapshots/") if n.endswith(".pb")]

    def newest_snapshot(self) -> list[simulator_pb2.Job]:
        """The finished jobs of the newest snapshot ([] when there is none)."""
        names = self._snapshot_names()
        if not names:
            return []
        try:
            data = self.store.get_bytes(names[-1])
        except NotFound:  # replaced between the list and the read: the next start has it
            return []
        return list(simulator_pb2.ListJobsResponse.FromString(data).jobs)

    def put_snapshot(self, jobs: list[simulator_pb2.Job]) -> str:
        """Write the finished `jobs` as the newest snapshot; drop all but SNAPSHOTS_KEPT."""
        finished = sorted((j for j in jobs if j.state in _TERMINAL), key=lambda j: j.job_id)
        key = f"{self.prefix}/snapshots/{time.time_ns():020d}.pb"
        self.store.put_bytes(key, simulator_pb2.ListJobsResponse(jobs=finished)
                             .SerializeToString(deterministic=True))
        for old in self._snapshot_names()[:-SNAPSHOTS_KEPT]:
            self.store.delete(old)
        return key
