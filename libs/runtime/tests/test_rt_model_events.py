"""`k4d.model.published`: the one announce helper every publisher calls, and its reader."""

import pytest
from k4d.bus import InProcessBus
from k4d.bus.base import Message
from k4d.bus.topics import MODEL_PUBLISHED
from k4d.errors import InvalidArgument
from k4d.model_events import announce_model_published, read_model_published
from kinema4d.v1 import events_pb2


def test_rt_announce_model_published_round_trips_keyed_by_name():
    bus = InProcessBus()
    consumer = bus.consumer([MODEL_PUBLISHED], "test")
    sent = announce_model_published(bus, "arm", "7", "s3://b/models/arm/7",
                                    manifest_sha256="ab" * 32, variant="act")
    (message,) = consumer.poll(1.0, max_records=5)
    assert message.key == b"arm"
    event = read_model_published(message)
    assert event == sent
    assert (event.model.name, event.model.version, event.model.uri, event.model.variant) == (
        "arm", "7", "s3://b/models/arm/7", "act")
    assert event.header.created_at.seconds > 0


@pytest.mark.parametrize("value, field", [
    (b"\xff\xff not a protobuf", "event"),
    (events_pb2.ModelPublished().SerializeToString(), "model")])
def test_rt_read_model_published_rejects_bad_payloads(value, field):
    with pytest.raises(InvalidArgument) as info:
        read_model_published(Message(MODEL_PUBLISHED, 0, 0, None, value))
    assert info.value.violations[0].field == field


def test_rt_announce_needs_a_name_and_version():
    with pytest.raises(InvalidArgument):
        announce_model_published(InProcessBus(), "arm", "", "s3://b/models/arm")
