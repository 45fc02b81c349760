"""What every `k4d.sim.*` stage worker does around its own work: read the input event and
its job, honour a cancellation request (ADR 000) and publish the next event.

Stage workers (kinematics, projection, generation) call these so that the event
handling, the cancel marker and the event header mean the same thing in every stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp
from kinema4d.v1 import common_pb2, events_pb2

from k4d.bus.base import HEADER_OWNER, event_headers
from k4d.bus.topics import SIM_FAILED
from k4d.errors import InvalidArgument
from k4d.metrics import note_queued_since
from k4d.store.base import validate_key


@dataclass(frozen=True)
class StageContext:
    """The job a stage is working on, carried into every event it publishes."""

    stage: str
    job_id: str
    attempt: int
    traceparent: str
    owner: str = ""  # the job's submitter (EventHeader.owner), carried into every event


def cancel_marker_key(job_id: str) -> str:
    """Object-store key whose presence tells every stage worker to stop the job."""
    return f"jobs/{job_id}/cancel"


def is_cancelled(store, job_id: str) -> bool:
    return store.exists(cancel_marker_key(job_id))


def read_stage_event(message, event_type, stage: str):
    """Parse a bus message into `event_type` -> (event, StageContext). A payload of the
    wrong type or without a usable job id is InvalidArgument (dead-lettered at once)."""
    event = event_type()
    try:
        event.ParseFromString(message.value)
    except DecodeError:
        raise InvalidArgument.for_field(
            "event", f"not a {event_type.DESCRIPTOR.name} payload") from None
    job_id = event.header.job_id or message.job_id or ""
    if not job_id:
        raise InvalidArgument.for_field("header.job_id", "missing")
    validate_key(f"jobs/{job_id}", "header.job_id")
    traceparent = message.header("traceparent") or event.header.traceparent
    if event.header.HasField("created_at"):  # queue time of this stage (k4d.metrics)
        note_queued_since(event.header.created_at.ToNanoseconds() / 1e9)
    owner = event.header.owner or message.header(HEADER_OWNER) or ""
    return event, StageContext(stage, job_id, message.attempt, traceparent, owner)


def publish_stage_event(bus, topic: str, context: StageContext, event) -> None:
    """Stamp `event.header` from the context and publish it keyed by job id (with the
    job's owner in the header and the `k4d-owner` Kafka header)."""
    created = Timestamp()
    created.GetCurrentTime()
    event.header.CopyFrom(events_pb2.EventHeader(
        job_id=context.job_id, stage=context.stage, attempt=context.attempt,
        created_at=created, traceparent=context.traceparent, owner=context.owner))
    extra = {HEADER_OWNER: context.owner} if context.owner else {}
    bus.publish(topic, context.job_id, event.SerializeToString(),
                event_headers(context.job_id, attempt=1, **extra))


def publish_cancelled(bus, context: StageContext) -> None:
    """The job was cancelled before or during this stage: SimulationFailed{CANCELLED}."""
    publish_stage_event(bus, SIM_FAILED, context, events_pb2.SimulationFailed(
        error=common_pb2.ErrorInfo(code="CANCELLED", stage=context.stage, message="cancelled")))
