"""`k4d.model.published`: the announcement that a model version is in the registry.

Whoever publishes a model version (`k4d generate publish`, the generator's
`registry.publish(..., bus=...)`, the trainer at the end of a run) calls
`announce_model_published` once the version's manifest is written, so that a version is
never announced before every one of its files can be fetched. Generators listen on the
topic (each process in a group of its own) and switch to the new version of the model
they serve between jobs.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp
from kinema4d.v1 import events_pb2, generator_pb2

from k4d.bus.base import event_headers
from k4d.bus.topics import MODEL_PUBLISHED
from k4d.errors import InvalidArgument

STAGE = "model-registry"


def announce_model_published(bus, name: str, version: str, uri: str, *,
                             manifest_sha256: str = "", variant: str = "",
                             traceparent: str = "") -> events_pb2.ModelPublished:
    """Publish ModelPublished{model: name, version, uri, ...} on `k4d.model.published`,
    keyed by the model name (announcements of one model stay in order). Call it only after
    the version's manifest is stored. Returns the event sent."""
    if not name or not version:
        raise InvalidArgument.for_field("model", "a published model needs a name and a version")
    created = Timestamp()
    created.GetCurrentTime()
    event = events_pb2.ModelPublished(
        header=events_pb2.EventHeader(stage=STAGE, attempt=1, created_at=created,
                                      traceparent=traceparent),
        model=generator_pb2.ModelInfo(name=name, version=version, uri=uri,
                                      manifest_sha256=manifest_sha256, variant=variant))
    bus.ensure_topics([MODEL_PUBLISHED])
    bus.publish(MODEL_PUBLISHED, name, event.SerializeToString(), event_headers())
    return event


def read_model_published(message) -> events_pb2.ModelPublished:
    """A bus message -> ModelPublished; a foreign payload or one without a model name and
    version is InvalidArgument (dead-lettered at once by the StageWorker)."""
    event = events_pb2.ModelPublished()
    try:
        event.ParseFromString(message.value)
    except DecodeError:
        raise InvalidArgument.for_field("event", "not a ModelPublished payload") from None
    if not event.model.name or not event.model.version:
        raise InvalidArgument.for_field("model", "ModelPublished without a name and version")
    return event
