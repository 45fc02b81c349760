"""The `k4d.sim.*` topics, their payload types and event construction helpers.

Every event is a protobuf message keyed by job id with a `traceparent` header and a
`k4d-attempt` header (events.proto). The submit path adds `k4d-idempotency-key` (for
tracing a request back to its key; the keys themselves are records in the object store)
and `k4d-owner`, the submitter's name (also in the event's header, where the job table
reads it from).
"""

from __future__ import annotations

import time

from google.protobuf import timestamp_pb2
from k4d import pipeline_topology
from k4d.bus import topics
from k4d.bus.base import HEADER_OWNER
from kinema4d.v1 import events_pb2

# The runtime owns the topic names; these aliases read better in this module's callers.
TOPIC_REQUESTED = topics.SIM_REQUESTED
TOPIC_KINEMATICS = topics.SIM_KINEMATICS
TOPIC_PROJECTED = topics.SIM_PROJECTED
TOPIC_COMPLETED = topics.SIM_COMPLETED
TOPIC_FAILED = topics.SIM_FAILED
TOPIC_PROGRESS = topics.SIM_PROGRESS

# Every topic the job records are folded from, with its payload type (pipeline topology).
PAYLOAD_TYPES = {topic: pipeline_topology.event_type(topic)
                 for topic in pipeline_topology.JOB_STATE_TOPICS}
SIM_TOPICS = tuple(PAYLOAD_TYPES)

HEADER_IDEMPOTENCY_KEY = "k4d-idempotency-key"

# Pipeline order of the stages; progress never moves backwards through it.
STAGE_ORDER = {name: i for i, name in enumerate(
    ["submit", *(s.name for s in pipeline_topology.simulation_stages())])}


def decode(topic: str, payload: bytes):
    """Parse an event payload of `topic`; KeyError for a topic that is not a k4d.sim one."""
    message = PAYLOAD_TYPES[topic]()
    message.ParseFromString(payload)
    return message


def timestamp_now(now_s: float | None = None) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int((time.time() if now_s is None else now_s) * 1e9))
    return ts


def header(job_id: str, stage: str, attempt: int = 1, traceparent: str = "",
           now_s: float | None = None, owner: str = "") -> events_pb2.EventHeader:
    return events_pb2.EventHeader(job_id=job_id, stage=stage, attempt=attempt,
                                  created_at=timestamp_now(now_s), traceparent=traceparent,
                                  owner=owner)


def owner_headers(owner: str, **extra: str) -> dict[str, str]:
    """Extra Kafka headers of an event of `owner`'s job (none for an anonymous one)."""
    return {HEADER_OWNER: owner, **extra} if owner else dict(extra)
