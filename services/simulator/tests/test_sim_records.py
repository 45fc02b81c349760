"""JobRecords on a local store: create-once idempotency claims with their window, release,
request and final records, load / load_all."""

from __future__ import annotations

import pytest
from k4d.store import LocalStore
from k4d_simulator import events as ev
from k4d_simulator.records import JobRecords
from kinema4d.v1 import events_pb2, simulator_pb2

HOUR_NS = 3600 * 10**9
WINDOW_S = 24 * 3600.0


def _request(job_id: str, t_s: float) -> events_pb2.SimulationRequested:
    return events_pb2.SimulationRequested(header=ev.header(job_id, "submit", now_s=t_s))


@pytest.fixture
def records(tmp_path):
    return JobRecords(LocalStore(tmp_path / "store"))


def test_a_key_is_one_job_within_its_window_and_one_new_job_after(records):
    t0 = 1_000_000.0
    first = _request("sim-1-000000000001", t0)
    assert records.claim("k", first, int(t0 * 1e9), WINDOW_S) == (first, True)
    owner, created = records.claim("k", _request("sim-2-000000000002", t0 + 3600),
                                   int(t0 * 1e9) + HOUR_NS, WINDOW_S)
    assert (owner.header.job_id, created) == ("sim-1-000000000001", False)
    later = _request("sim-3-000000000003", t0 + 25 * 3600)
    assert records.claim("k", later, int(t0 * 1e9) + 25 * HOUR_NS, WINDOW_S) == (later, True)
    owner, created = records.claim("k", _request("sim-4-000000000004", t0 + 26 * 3600),
                                   int(t0 * 1e9) + 26 * HOUR_NS, WINDOW_S)
    assert (owner.header.job_id, created) == ("sim-3-000000000003", False)
    assert records.claim("other", _request("sim-5-000000000005", t0), int(t0 * 1e9),
                         WINDOW_S)[1]


def test_a_released_claim_lets_the_next_submit_make_a_job(records):
    dead = _request("sim-1-000000000001", 10.0)
    assert records.claim("k", dead, int(10e9), WINDOW_S)[1]
    records.release("k", dead)
    fresh = _request("sim-2-000000000002", 11.0)
    assert records.claim("k", fresh, int(11e9), WINDOW_S) == (fresh, True)


def test_request_and_final_records_load_back(records):
    queued, done = _request("sim-1-00000000000a", 1.0), _request("sim-2-00000000000b", 2.0)
    records.put_requested(queued)
    records.put_requested(done)
    S = simulator_pb2.JobState
    final = simulator_pb2.Job(job_id="sim-2-00000000000b", state=S.JOB_STATE_SUCCEEDED)
    assert records.put_final(final) and not records.put_final(
        simulator_pb2.Job(job_id="sim-2-00000000000b", state=S.JOB_STATE_FAILED))
    assert records.load("sim-1-00000000000a") == (queued, None)
    assert records.load("sim-2-00000000000b") == (None, final)  # the first final stays
    assert records.load("sim-9-00000000000c") == (None, None)
    assert records.load("x" * 5000) == (None, None)
    snapshot, rest = records.load_all()
    assert snapshot == []
    assert sorted((r.header.job_id if r else f.job_id) for r, f in rest) == [
        "sim-1-00000000000a", "sim-2-00000000000b"]
    assert records.is_published("sim-1-00000000000a")
    assert not records.is_published("sim-9-00000000000c")


class CountingStore(LocalStore):
    """A local store that counts reads (to see what a start costs)."""

    def __init__(self, root):
        super().__init__(root)
        self.reads = 0

    def get_bytes(self, key, expected_sha256=None):
        self.reads += 1
        return super().get_bytes(key, expected_sha256)


def _final(i: int) -> simulator_pb2.Job:
    return simulator_pb2.Job(job_id=f"sim-{i:x}-{i:012x}",
                             state=simulator_pb2.JobState.JOB_STATE_SUCCEEDED)


def test_a_start_after_a_snapshot_reads_one_object_plus_the_newer_records(tmp_path):
    from k4d.bus import InProcessBus
    from k4d_simulator.feed import JobFeed
    from k4d_simulator.jobs import JobTable

    store = CountingStore(tmp_path / "store")
    records = JobRecords(store)
    for i in range(1, 31):
        records.put_final(_final(i))
    records.put_requested(_request("sim-99-000000000099", 5.0))  # unfinished: never snapshot

    first = JobTable()
    JobFeed(InProcessBus(), first, records, snapshot_min_records=10).load_records()
    assert len(first) == 31 and len(records._snapshot_names()) == 1

    for i in range(31, 36):  # finished after the snapshot
        records.put_final(_final(i))
    store.reads = 0
    second = JobTable()
    JobFeed(InProcessBus(), second, records, snapshot_min_records=10).load_records()
    # the snapshot, the 5 newer finals, the unfinished job (no final, then its request)
    assert store.reads == 1 + 5 + 2
    assert len(second) == 36
    assert all(second.get(job.job_id) == job for job in first.list(500)[0])
    assert all(second.get(_final(i).job_id) == _final(i) for i in range(31, 36))
    assert second.get("sim-99-000000000099").state == simulator_pb2.JobState.JOB_STATE_QUEUED
    assert len(records._snapshot_names()) == 1  # 5 < 10: no new snapshot


def test_only_the_newest_snapshots_are_kept(records):
    for i in range(4):
        records.put_snapshot([_final(j) for j in range(1, i + 2)])
    assert len(records._snapshot_names()) == 2
    assert [j.job_id for j in records.newest_snapshot()] == sorted(
        _final(j).job_id for j in range(1, 5))
