"""Training job records: ids, the state machine, and folding a run's status.json in.

Pure functions on `TrainingJob` protos (no network, no clock except where passed in):
- states only move forward: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, and a
  terminal state is sticky (a late or duplicated update changes nothing a user sees);
- step and loss come from the run's `status.json` (the training program's contract:
  {"state", "step", "total_steps", "loss", "checkpoint_uri", "published_model", "error",
  "updated_at"}), applied with `apply_status`.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Mapping

from google.protobuf import timestamp_pb2
from kinema4d.v1 import common_pb2, trainer_pb2

T = trainer_pb2.TrainingState
TERMINAL_STATES = frozenset({T.TRAINING_STATE_SUCCEEDED, T.TRAINING_STATE_FAILED,
                             T.TRAINING_STATE_CANCELLED})
_RANK = {T.TRAINING_STATE_UNSPECIFIED: -1, T.TRAINING_STATE_QUEUED: 0,
         T.TRAINING_STATE_RUNNING: 1, T.TRAINING_STATE_SUCCEEDED: 2,
         T.TRAINING_STATE_FAILED: 2, T.TRAINING_STATE_CANCELLED: 2}
# status.json "state" -> TrainingState
RUN_STATES = {"running": T.TRAINING_STATE_RUNNING, "succeeded": T.TRAINING_STATE_SUCCEEDED,
              "failed": T.TRAINING_STATE_FAILED, "cancelled": T.TRAINING_STATE_CANCELLED}
JOB_ID = re.compile(r"^train-[0-9a-f]{11}-[0-9a-f]{12}$")
MAX_ERROR_CHARS = 2000


def new_job_id(now_s: float | None = None) -> str:
    """URL-safe, unique, and sortable by creation time (newest = greatest):
    train-<unix ms, 11 hex digits>-<random>."""
    now_ms = int((time.time() if now_s is None else now_s) * 1000)
    return f"train-{now_ms:011x}-{uuid.uuid4().hex[:12]}"


def is_job_id(value: str) -> bool:
    return bool(JOB_ID.match(value))


def is_terminal(state: int) -> bool:
    return state in TERMINAL_STATES


def state_name(state: int) -> str:
    return T.Name(state) if state in _RANK else str(state)


def timestamp(now_s: float | None = None) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int((time.time() if now_s is None else now_s) * 1e9))
    return ts


def new_job(job_id: str, spec: trainer_pb2.TrainingJobSpec, run_uri: str, total_steps: int,
            now_s: float | None = None) -> trainer_pb2.TrainingJob:
    created = timestamp(now_s)
    return trainer_pb2.TrainingJob(job_id=job_id, spec=spec, state=T.TRAINING_STATE_QUEUED,
                                   run_uri=run_uri, total_steps=total_steps,
                                   created_at=created, updated_at=created)


def advance(job: trainer_pb2.TrainingJob, state: int) -> bool:
    """Move `job` to `state` if that is forward and the job is not finished yet."""
    if is_terminal(job.state) or _RANK.get(state, -1) <= _RANK.get(job.state, -1):
        return False
    job.state = state
    if is_terminal(state):
        job.cancel_requested = False
    return True


def error_info(code: str, message: str, stage: str = "trainer",
               violations: list[tuple[str, str]] | None = None) -> common_pb2.ErrorInfo:
    return common_pb2.ErrorInfo(
        code=code, message=message[:MAX_ERROR_CHARS], stage=stage,
        violations=[common_pb2.FieldViolation(field=f, description=d)
                    for f, d in (violations or [])])


def finish(job: trainer_pb2.TrainingJob, state: int, error: common_pb2.ErrorInfo | None = None,
           now_s: float | None = None) -> bool:
    """Terminal transition with its error; False (and nothing changed) if already finished."""
    if not advance(job, state):
        return False
    if error is not None:
        job.error.CopyFrom(error)
    job.updated_at.CopyFrom(timestamp(now_s))
    return True


def _uint(value, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    if isinstance(value, float) and not math.isfinite(value):
        return default
    return max(0, min(int(value), 2**32 - 1))


def apply_status(job: trainer_pb2.TrainingJob, status: Mapping, now_s: float | None = None) -> bool:
    """Fold one status.json document into the record; returns whether anything changed.
    Progress (step) never moves backwards: a resumed run restarts from its checkpoint, and
    the record keeps the furthest step any attempt reported until the new one passes it."""
    before = job.SerializeToString(deterministic=True)
    if is_terminal(job.state):
        return False
    state = RUN_STATES.get(status.get("state"))
    step = _uint(status.get("step"))
    if step >= job.step:
        job.step = step
        loss = status.get("loss")
        if isinstance(loss, int | float) and not isinstance(loss, bool) and math.isfinite(loss):
            job.loss = float(loss)
    total = _uint(status.get("total_steps"))
    if total:
        job.total_steps = total
    checkpoint = status.get("checkpoint_uri")
    if isinstance(checkpoint, str) and checkpoint:
        job.checkpoint_uri = checkpoint[:2048]
    published = status.get("published_model")
    if isinstance(published, Mapping) and isinstance(published.get("name"), str):
        job.published_model.CopyFrom(common_pb2.ModelRef(
            name=published["name"][:200], version=str(published.get("version") or "")[:200]))
    if state == T.TRAINING_STATE_FAILED:
        message = status.get("error")
        job.error.CopyFrom(error_info("INTERNAL", message if isinstance(message, str) and message
                                      else "the training run failed"))
    elif state == T.TRAINING_STATE_CANCELLED:
        job.error.CopyFrom(error_info("CANCELLED", "cancelled"))
    if state is not None:
        advance(job, state)
    changed = job.SerializeToString(deterministic=True) != before
    if changed:
        job.updated_at.CopyFrom(timestamp(now_s))
    return changed
