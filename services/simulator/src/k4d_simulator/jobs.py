"""Job records derived from the `k4d.sim.*` events: the state machine and the JobTable.

The table is a pure fold over events: `apply(topic, event)` is idempotent, so replaying
every topic from the beginning rebuilds the same table (a restarted simulator does that),
and a redelivered stage event changes nothing a user can see:
- states only move forward: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED;
- terminal states are sticky: the first terminal event wins, later ones are only counted;
- progress never moves backwards through the stage order;
- events may arrive in any order across topics (a completion replayed before its request).

Timestamps come from the event headers, never the wall clock, so a replay reproduces them.
A succeeded job's `result.stages` is folded from every stage's event (the kinematics
stage's failed frames and time, the others' times, the generator's static-world flag),
whatever order they arrive in. Records restored from the durable store (`restore`) are
terminal and final: later events change nothing in them.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from k4d.errors import InvalidArgument, NotFound
from k4d.model_names import STATIC_WORLD
from kinema4d.v1 import common_pb2, simulator_pb2

from k4d_simulator import events as ev
from k4d_simulator.outcomes import stage_outcomes
from k4d_simulator.validation import DEFAULT_NUM_FRAMES

S = simulator_pb2.JobState
TERMINAL_STATES = frozenset({S.JOB_STATE_SUCCEEDED, S.JOB_STATE_FAILED, S.JOB_STATE_CANCELLED})
_STATE_RANK = {S.JOB_STATE_UNSPECIFIED: -1, S.JOB_STATE_QUEUED: 0, S.JOB_STATE_RUNNING: 1,
               S.JOB_STATE_SUCCEEDED: 2, S.JOB_STATE_FAILED: 2, S.JOB_STATE_CANCELLED: 2}
IDEMPOTENCY_WINDOW_S = 24 * 3600.0
MAX_PAGE_SIZE = 500
_DONE = "completed"
DEFAULT_PAGE_SIZE = 50


def is_terminal(state: int) -> bool:
    return state in TERMINAL_STATES


@dataclass
class _Record:
    job: simulator_pb2.Job
    version: int = 0
    # Every terminal event seen for this job, duplicates and late losers included; the
    # user-visible state changed on the first only ("completed exactly once").
    terminal_events: int = 0
    completion_events: int = 0
    spec: object = None
    # Kinematics outcome (from KinematicsCompleted), folded into result.stages.
    failed_frames: int = 0
    kinematics_seconds: float | None = None
    num_frames: int = 0
    # Restored from a durable final record: nothing may change it any more.
    restored: bool = False


def _ts_ns(ts) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


class JobTable:
    """Thread-safe job records keyed by job id. Writers call `apply`; readers `get`,
    `list`, `wait_for_change` (Watch). Idempotency keys are not kept here: they are
    create-once records in the object store, shared by every replica (records.py)."""

    def __init__(self) -> None:
        self._records: dict[str, _Record] = {}
        self._changed = threading.Condition()
        self._finished: list[str] = []  # became terminal by `apply`, not yet taken

    # --- writing -------------------------------------------------------------------

    def apply(self, topic: str, event, headers: Mapping[str, str] | None = None) -> bool:
        """Fold one event into the table; returns whether a user-visible field changed.
        `event` is the payload message or its serialized bytes."""
        if isinstance(event, bytes | bytearray | memoryview):
            event = ev.decode(topic, bytes(event))
        job_id = event.header.job_id
        if not job_id:
            raise InvalidArgument.for_field("header.job_id", "event without a job id")
        with self._changed:
            record = self._records.get(job_id)
            if record is None:
                record = self._records[job_id] = _Record(simulator_pb2.Job(job_id=job_id))
                record.job.created_at.CopyFrom(event.header.created_at)
            before = record.job.SerializeToString(deterministic=True)
            was_terminal = is_terminal(record.job.state)
            if not record.restored:
                self._fold(record, topic, event, dict(headers or {}))
                _fold_stages(record)
            changed = record.job.SerializeToString(deterministic=True) != before
            if is_terminal(record.job.state) and not was_terminal:
                self._finished.append(job_id)
            if changed:
                # Only events that changed the record move updated_at: an ignored duplicate
                # (a replay's second failure) must not, or replays would differ.
                created = event.header.created_at
                if _ts_ns(created) > _ts_ns(record.job.updated_at):
                    record.job.updated_at.CopyFrom(created)
                record.version += 1
                self._changed.notify_all()
            return changed

    def _fold(self, record: _Record, topic: str, event, headers: dict[str, str]) -> None:
        job, created = record.job, event.header.created_at
        # The request's time is the job's creation time; until it is seen (replays may
        # deliver other topics first), the earliest event time stands in.
        if topic == ev.TOPIC_REQUESTED or (
                record.spec is None and 0 < _ts_ns(created) < _ts_ns(job.created_at)):
            job.created_at.CopyFrom(created)
        if topic == ev.TOPIC_REQUESTED:
            job.owner = event.header.owner
            record.spec = event.spec
            record.num_frames = record.num_frames or event.spec.num_frames or DEFAULT_NUM_FRAMES
            self._advance(job, S.JOB_STATE_QUEUED)
        elif topic == ev.TOPIC_KINEMATICS:
            record.failed_frames = event.failed_frames
            record.kinematics_seconds = event.seconds
            record.num_frames = event.spec.num_frames or record.num_frames or DEFAULT_NUM_FRAMES
            self._running(job, common_pb2.Progress(stage="kinematics", step=1, total=1,
                                                   message="kinematics done"))
        elif topic == ev.TOPIC_PROJECTED:
            self._running(job, common_pb2.Progress(stage="projection", step=1, total=1,
                                                   message="projection done"))
        elif topic == ev.TOPIC_PROGRESS:
            self._running(job, event.progress)
        elif topic == ev.TOPIC_COMPLETED:
            record.terminal_events += 1
            record.completion_events += 1
            if not is_terminal(job.state):
                job.result.CopyFrom(event.result)
                _raise_progress(job, common_pb2.Progress(
                    stage="generation", step=1, total=1, message=_DONE))
                self._advance(job, S.JOB_STATE_SUCCEEDED)
        elif topic == ev.TOPIC_FAILED:
            record.terminal_events += 1
            if not is_terminal(job.state):
                job.error.CopyFrom(event.error)
                cancelled = event.error.code == "CANCELLED"
                if cancelled:
                    job.cancel_requested = True
                self._advance(job, S.JOB_STATE_CANCELLED if cancelled else S.JOB_STATE_FAILED)
        else:
            raise InvalidArgument.for_field("topic", f"not a k4d.sim topic: {topic!r}")

    @staticmethod
    def _advance(job: simulator_pb2.Job, state: int) -> None:
        if not is_terminal(job.state) and _STATE_RANK[state] > _STATE_RANK[job.state]:
            job.state = state

    def _running(self, job: simulator_pb2.Job, progress: common_pb2.Progress) -> None:
        self._advance(job, S.JOB_STATE_RUNNING)
        _raise_progress(job, progress)

    def restore(self, job: simulator_pb2.Job) -> bool:
        """Adopt a durable final record (terminal): it replaces whatever the events folded
        so far and stays as it is. Returns whether the table changed."""
        if not is_terminal(job.state):
            raise InvalidArgument.for_field("job.state", "only terminal records are restored")
        with self._changed:
            record = self._records.get(job.job_id)
            if record is not None and record.restored:
                return False
            if record is None:
                record = self._records[job.job_id] = _Record(_copy(job))
            else:
                record.job = _copy(job)
            record.restored = True
            record.terminal_events = max(record.terminal_events, 1)
            record.completion_events = max(record.completion_events,
                                           int(job.state == S.JOB_STATE_SUCCEEDED))
            record.version += 1
            self._changed.notify_all()
            return True

    def take_finished(self) -> list[simulator_pb2.Job]:
        """Jobs that became terminal through `apply` since the last call (each once):
        the feed writes their durable final records."""
        with self._changed:
            ids, self._finished = self._finished, []
            return [_copy(self._records[i].job) for i in dict.fromkeys(ids)]

    def mark_cancel_requested(self, job_id: str) -> simulator_pb2.Job:
        """Record a cancellation request (the store marker is the durable copy)."""
        with self._changed:
            record = self._record(job_id)
            if not record.job.cancel_requested and not is_terminal(record.job.state):
                record.job.cancel_requested = True
                record.version += 1
                self._changed.notify_all()
            return _copy(record.job)

    # --- reading -------------------------------------------------------------------

    def _record(self, job_id: str) -> _Record:
        record = self._records.get(job_id)
        if record is None:
            raise NotFound(f"no job with id {job_id!r}")
        return record

    def get(self, job_id: str) -> simulator_pb2.Job:
        with self._changed:
            return _copy(self._record(job_id).job)

    def __contains__(self, job_id: str) -> bool:
        with self._changed:
            return job_id in self._records

    def __len__(self) -> int:
        with self._changed:
            return len(self._records)

    def spec(self, job_id: str):
        """The SimulationSpec of a job whose request has been seen, else None."""
        with self._changed:
            return self._record(job_id).spec

    def counts(self, job_id: str) -> tuple[int, int]:
        """(completion events seen, terminal events seen) for a job: duplicates show here,
        never in its state."""
        with self._changed:
            record = self._record(job_id)
            return record.completion_events, record.terminal_events

    def state_counts(self) -> dict[int, int]:
        """Number of jobs per JobState (every state present, zeros included)."""
        counts = dict.fromkeys(_STATE_RANK, 0)
        counts.pop(S.JOB_STATE_UNSPECIFIED)
        with self._changed:
            for record in self._records.values():
                counts[record.job.state] = counts.get(record.job.state, 0) + 1
        return counts

    def ignored_terminal_events(self) -> int:
        """Terminal events that changed nothing (redelivered completions, late failures)."""
        with self._changed:
            return sum(max(0, r.terminal_events - 1) for r in self._records.values())

    def version(self, job_id: str) -> int:
        with self._changed:
            return self._record(job_id).version

    def wait_for_change(self, job_id: str, seen_version: int,
                        timeout_s: float) -> tuple[simulator_pb2.Job, int]:
        """Block until the job's version exceeds `seen_version` (or the timeout); returns
        the current job and version. NotFound when the job appears within the timeout."""
        with self._changed:
            self._changed.wait_for(
                lambda: job_id in self._records and self._records[job_id].version > seen_version,
                timeout=timeout_s)
            record = self._record(job_id)
            return _copy(record.job), record.version

    def list(self, page_size: int = 0, page_token: str = "",
             state: int = S.JOB_STATE_UNSPECIFIED,
             owner: str | None = None) -> tuple[list[simulator_pb2.Job], str]:
        """Jobs newest first (created_at, then job id), one page; returns the page and the
        token of the next page ("" when this is the last). Keyset paging: jobs created
        while a client pages never shift the pages it has not read yet. `owner`: only
        that caller's jobs (None: everyone's)."""
        if not 0 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidArgument.for_field("page_size", f"must be in [0, {MAX_PAGE_SIZE}] "
                                                         f"(0: {DEFAULT_PAGE_SIZE}), got {page_size}")
        size = page_size or DEFAULT_PAGE_SIZE
        after = _decode_token(page_token) if page_token else None
        with self._changed:
            jobs = [r.job for r in self._records.values()
                    if (state == S.JOB_STATE_UNSPECIFIED or r.job.state == state)
                    and (owner is None or r.job.owner == owner)]
            jobs.sort(key=_sort_key)
            if after is not None:
                jobs = [j for j in jobs if _sort_key(j) > after]
            page = [_copy(j) for j in jobs[:size]]
        next_token = _encode_token(_sort_key(page[-1])) if len(jobs) > size else ""
        return page, next_token


def _fold_stages(record: _Record) -> None:
    """result.stages of a succeeded job from what the stage events said."""
    job = record.job
    if job.state != S.JOB_STATE_SUCCEEDED:
        return
    seconds = dict(job.result.stage_seconds)
    if record.kinematics_seconds is not None:
        seconds.setdefault("kinematics", record.kinematics_seconds)
    outcomes = stage_outcomes(seconds, failed_frames=record.failed_frames,
                              num_frames=record.num_frames or DEFAULT_NUM_FRAMES,
                              static_world=job.result.model.name == STATIC_WORLD)
    del job.result.stages[:]
    job.result.stages.extend(outcomes)


def _progress_key(progress: common_pb2.Progress) -> tuple[int, int, int]:
    return (ev.STAGE_ORDER.get(progress.stage, 0), int(progress.message == _DONE), progress.step)


def _raise_progress(job: simulator_pb2.Job, progress: common_pb2.Progress) -> None:
    """Progress is a maximum over (stage, done, step), whatever the state: then the
    order events arrive in does not matter, and a failed job shows how far it got."""
    if not job.HasField("progress") or _progress_key(progress) > _progress_key(job.progress):
        job.progress.CopyFrom(progress)


def _copy(job: simulator_pb2.Job) -> simulator_pb2.Job:
    out = simulator_pb2.Job()
    out.CopyFrom(job)
    return out


def _sort_key(job: simulator_pb2.Job) -> tuple[int, str]:
    return (-_ts_ns(job.created_at), job.job_id)


def _encode_token(key: tuple[int, str]) -> str:
    return base64.urlsafe_b64encode(f"{-key[0]}:{key[1]}".encode()).decode()


def _decode_token(token: str) -> tuple[int, str]:
    try:
        created, job_id = base64.urlsafe_b64decode(token.encode()).decode().split(":", 1)
        return (-int(created), job_id)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument.for_field("page_token", "not a token from a previous ListJobs") from None
