"""The trainer's events: `k4d.train.requested` (TrainingRequested, from Submit) and
`k4d.train.events` (TrainingEvent: every state change and progress of a job), keyed by
job id with the runtime's event headers (events.proto)."""

from __future__ import annotations

from k4d.bus import event_headers
from k4d.bus.topics import TRAIN_EVENTS, TRAIN_REQUESTED
from k4d.telemetry import inject_trace_headers
from kinema4d.v1 import events_pb2, trainer_pb2

from k4d_trainer.control import jobs

STAGE = "trainer"
HEADER_IDEMPOTENCY_KEY = "k4d-idempotency-key"


def current_traceparent() -> str:
    headers: dict[str, bytes] = {}
    inject_trace_headers(headers)
    return headers.get("traceparent", b"").decode()


def header(job_id: str, stage: str, attempt: int = 1, traceparent: str = "") -> events_pb2.EventHeader:
    return events_pb2.EventHeader(job_id=job_id, stage=stage, attempt=attempt,
                                  created_at=jobs.timestamp(), traceparent=traceparent)


def publish_requested(bus, job: trainer_pb2.TrainingJob, idempotency_key: str = "") -> None:
    event = events_pb2.TrainingRequested(
        header=header(job.job_id, "submit", traceparent=current_traceparent()), spec=job.spec)
    extra = {HEADER_IDEMPOTENCY_KEY: idempotency_key} if idempotency_key else {}
    bus.publish(TRAIN_REQUESTED, job.job_id, event.SerializeToString(),
                event_headers(job.job_id, 1, **extra))


def training_event(job: trainer_pb2.TrainingJob, stage: str = STAGE,
                   traceparent: str = "") -> events_pb2.TrainingEvent:
    event = events_pb2.TrainingEvent(
        header=header(job.job_id, stage, traceparent=traceparent), state=job.state,
        step=job.step, loss=job.loss, checkpoint_uri=job.checkpoint_uri,
        total_steps=job.total_steps, run_uri=job.run_uri)
    if job.HasField("error"):
        event.error.CopyFrom(job.error)
    if job.HasField("published_model"):
        event.published_model.CopyFrom(job.published_model)
    return event


def publish_event(bus, job: trainer_pb2.TrainingJob, stage: str = STAGE, traceparent: str = "") -> None:
    """The job's current state on `k4d.train.events`."""
    event = training_event(job, stage, traceparent)
    bus.publish(TRAIN_EVENTS, job.job_id, event.SerializeToString(), event_headers(job.job_id, 1))
