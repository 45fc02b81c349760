"""Durable training job records in the object store.

Layout (deterministic keys, one object per record so a restarted or second trainer
process sees every job):
  trainer/jobs/<job_id>.json             the TrainingJob (proto JSON)
  trainer/cancel/<job_id>                a cancellation request (the durable marker)
  trainer/idempotency/<sha256(key)>.json {"job_id", "created_unix"} of a Submit key
  trainer/runs/<job_id>/                 the run directory (RUN_URI) the training program
                                         writes status.json, metrics.jsonl, checkpoints to

Writes from this process are serialised per record (`update` is read-modify-write under a
lock); across processes the state machine of `jobs` (forward only, terminal sticky) keeps
concurrent writers from undoing each other's terminal state.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable

from google.protobuf import json_format
from k4d.errors import InvalidArgument, NotFound
from kinema4d.v1 import trainer_pb2

from k4d_trainer.control import jobs

PREFIX = "trainer"
JOBS_PREFIX = f"{PREFIX}/jobs/"
IDEMPOTENCY_WINDOW_S = 24 * 3600.0
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def record_key(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}.json"


def cancel_key(job_id: str) -> str:
    return f"{PREFIX}/cancel/{job_id}"


def run_key(job_id: str) -> str:
    return f"{PREFIX}/runs/{job_id}"


def _idempotency_key(key: str) -> str:
    return f"{PREFIX}/idempotency/{hashlib.sha256(key.encode()).hexdigest()}.json"


def to_json(job: trainer_pb2.TrainingJob) -> bytes:
    return json_format.MessageToJson(job, sort_keys=True).encode()


def from_json(data: bytes) -> trainer_pb2.TrainingJob:
    return json_format.Parse(data, trainer_pb2.TrainingJob())


class JobRecords:
    """TrainingJob records of one object store."""

    def __init__(self, store):
        self.store = store
        self._lock = threading.RLock()

    def run_uri(self, job_id: str) -> str:
        return self.store.uri_for(run_key(job_id))

    # --- writing -------------------------------------------------------------------

    def put(self, job: trainer_pb2.TrainingJob) -> None:
        with self._lock:
            self.store.put_bytes(record_key(job.job_id), to_json(job), "application/json")

    def update(self, job_id: str, change: Callable[[trainer_pb2.TrainingJob], bool]
               ) -> tuple[trainer_pb2.TrainingJob, bool]:
        """Read the record, apply `change` (returns whether it changed anything), write it
        back if so. Returns (the job after the change, changed)."""
        with self._lock:
            job = self.get(job_id)
            changed = bool(change(job))
            if changed:
                self.put(job)
            return job, changed

    def claim_idempotency(self, key: str, job_id: str, now_s: float | None = None,
                          wait_s: float = 5.0) -> str | None:
        """Bind `key` to `job_id` unless a live binding exists; returns the job id already
        bound to it (then the caller creates nothing) or None (the key is now `job_id`'s).
        The binding is a create-once object, so of concurrent Submits with one key, on any
        replica, exactly one creates a job. A binding older than the idempotency window, or
        one whose job never got its record (its submitter died), is replaced."""
        now_s = time.time() if now_s is None else now_s
        body = json.dumps({"job_id": job_id, "created_unix": now_s}).encode()
        name = _idempotency_key(key)
        if self.store.put_bytes_if_absent(name, body, "application/json"):
            return None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                bound = json.loads(self.store.get_bytes(name))
            except NotFound:  # deleted meanwhile
                bound = {"job_id": "", "created_unix": 0.0}
            live = now_s - float(bound["created_unix"]) <= IDEMPOTENCY_WINDOW_S
            if live and self.exists(bound["job_id"]):
                return bound["job_id"]
            if not live or time.monotonic() >= deadline:
                self.store.put_bytes(name, body, "application/json")
                return None
            time.sleep(0.05)  # the winner writes its record right after its claim

    def request_cancel(self, job_id: str) -> None:
        self.store.put_bytes(cancel_key(job_id), f"cancel requested at {time.time():.3f}\n".encode(),
                             "text/plain")

    # --- reading -------------------------------------------------------------------

    def get(self, job_id: str) -> trainer_pb2.TrainingJob:
        if not jobs.is_job_id(job_id):
            raise NotFound(f"no training job with id {job_id[:80]!r}")
        try:
            return from_json(self.store.get_bytes(record_key(job_id)))
        except NotFound:
            raise NotFound(f"no training job with id {job_id!r}") from None

    def exists(self, job_id: str) -> bool:
        return jobs.is_job_id(job_id) and self.store.exists(record_key(job_id))

    def cancel_requested(self, job_id: str) -> bool:
        return self.store.exists(cancel_key(job_id))

    def job_ids(self) -> list[str]:
        """Every job id, newest first (ids sort by creation time)."""
        ids = [k[len(JOBS_PREFIX):-len(".json")] for k in self.store.list(JOBS_PREFIX)
               if k.endswith(".json")]
        return sorted((i for i in ids if jobs.is_job_id(i)), reverse=True)

    def active(self) -> list[trainer_pb2.TrainingJob]:
        """Jobs not finished yet (QUEUED or RUNNING), oldest first."""
        out = []
        for job_id in reversed(self.job_ids()):
            try:
                job = self.get(job_id)
            except NotFound:
                continue
            if not jobs.is_terminal(job.state):
                out.append(job)
        return out

    def list(self, page_size: int = 0, page_token: str = "",
             state: int = jobs.T.TRAINING_STATE_UNSPECIFIED
             ) -> tuple[list[trainer_pb2.TrainingJob], str]:
        """One page of jobs, newest first, and the next page's token ("" = last page).
        Keyset paging on the job id: jobs submitted while a client pages never shift the
        pages it has not read yet."""
        if not 0 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidArgument.for_field(
                "page_size", f"must be in [0, {MAX_PAGE_SIZE}] (0: {DEFAULT_PAGE_SIZE}), got {page_size}")
        if state not in jobs.T.values():
            raise InvalidArgument.for_field("state", f"unknown TrainingState {state}")
        size = page_size or DEFAULT_PAGE_SIZE
        after = _decode_token(page_token) if page_token else None
        page: list[trainer_pb2.TrainingJob] = []
        more = False
        for job_id in self.job_ids():
            if after is not None and job_id >= after:
                continue
            if len(page) == size:
                more = True
                break
            try:
                job = self.get(job_id)
            except NotFound:
                continue  # deleted between the listing and the read
            if state in (jobs.T.TRAINING_STATE_UNSPECIFIED, job.state):
                page.append(job)
        # With a state filter the next page may turn out empty: the scan stops at a full page.
        return page, (_encode_token(page[-1].job_id) if more and page else "")


def _encode_token(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode()


def _decode_token(token: str) -> str:
    try:
        job_id = base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeError):
        job_id = ""
    if not jobs.is_job_id(job_id):
        raise InvalidArgument.for_field("page_token", "not a token from a previous ListTrainingJobs")
    return job_id
