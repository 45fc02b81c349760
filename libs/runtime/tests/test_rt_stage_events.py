"""The shared stage-worker event handling: parse + job context, cancel marker, publish."""

import pytest
from k4d.bus import InProcessBus
from k4d.bus.base import Message
from k4d.bus.stage_events import (
    StageContext,
    cancel_marker_key,
    is_cancelled,
    publish_cancelled,
    publish_stage_event,
    read_stage_event,
)
from k4d.bus.topics import SIM_FAILED, SIM_KINEMATICS
from k4d.errors import InvalidArgument
from k4d.store import LocalStore
from kinema4d.v1 import events_pb2


def _message(event, headers=None, key=b"job-1"):
    return Message(topic="k4d.sim.requested", partition=0, offset=0, key=key,
                   value=event.SerializeToString(), headers=headers or {})


def test_rt_read_stage_event_gives_event_and_context():
    event = events_pb2.SimulationRequested(header=events_pb2.EventHeader(
        job_id="job-1", traceparent="00-abc-def-01"))
    event.spec.num_frames = 7
    parsed, context = read_stage_event(_message(event, {"k4d-attempt": b"2"}),
                                       events_pb2.SimulationRequested, "kinematics")
    assert parsed.spec.num_frames == 7
    assert context == StageContext("kinematics", "job-1", 2, "00-abc-def-01")


@pytest.mark.parametrize("value, field", [(b"\xff\xff\xff", "event"), (b"", "header.job_id")])
def test_rt_read_stage_event_rejects_bad_payloads(value, field):
    message = Message(topic="t", partition=0, offset=0, key=None, value=value)
    with pytest.raises(InvalidArgument) as info:
        read_stage_event(message, events_pb2.SimulationRequested, "kinematics")
    assert info.value.violations[0].field == field


def test_rt_read_stage_event_rejects_a_job_id_that_escapes_the_key_space():
    event = events_pb2.SimulationRequested(header=events_pb2.EventHeader(job_id="../x"))
    with pytest.raises(InvalidArgument):
        read_stage_event(_message(event, key=None), events_pb2.SimulationRequested, "kinematics")


def test_rt_publish_stamps_the_header_and_cancel_reads_the_marker(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path)
    context = StageContext("projection", "job-9", 3, "00-t-s-01")
    consumer = bus.consumer([SIM_KINEMATICS, SIM_FAILED], "test")
    publish_stage_event(bus, SIM_KINEMATICS, context, events_pb2.KinematicsCompleted())
    assert not is_cancelled(store, "job-9")
    store.put_bytes(cancel_marker_key("job-9"), b"")
    assert is_cancelled(store, "job-9")
    publish_cancelled(bus, context)
    first, second = consumer.poll(1.0, max_records=2)
    done = events_pb2.KinematicsCompleted.FromString(first.value)
    assert (done.header.job_id, done.header.stage, done.header.attempt) == ("job-9", "projection", 3)
    assert done.header.traceparent == "00-t-s-01" and first.job_id == "job-9"
    failed = events_pb2.SimulationFailed.FromString(second.value)
    assert (failed.error.code, failed.error.stage) == ("CANCELLED", "projection")


def test_rt_the_owner_travels_from_the_request_into_every_stage_event(tmp_path):
    event = events_pb2.SimulationRequested(header=events_pb2.EventHeader(job_id="job-1",
                                                                         owner="alice"))
    _, context = read_stage_event(_message(event), events_pb2.SimulationRequested, "kinematics")
    assert context.owner == "alice"
    bus = InProcessBus()
    consumer = bus.consumer(SIM_KINEMATICS, "owner-test")
    publish_stage_event(bus, SIM_KINEMATICS, context, events_pb2.KinematicsCompleted())
    (message,) = consumer.poll(1.0)
    assert events_pb2.KinematicsCompleted.FromString(message.value).header.owner == "alice"
    assert message.header("k4d-owner") == "alice"
    anonymous = StageContext("projection", "job-2", 1, "")
    publish_stage_event(bus, SIM_KINEMATICS, anonymous, events_pb2.KinematicsCompleted())
    (message,) = consumer.poll(1.0)
    assert message.header("k4d-owner") is None


def test_rt_stage_prologue_skips_cancelled_jobs_and_reports_a_cancel_mid_stage(tmp_path):
    """StageWorker.for_stage: `handle(event, context)` runs for a live job; a job with a
    cancel marker, or one whose handler raises Cancelled, ends in SimulationFailed{CANCELLED}."""
    from k4d.bus import StageWorker
    from k4d.config import Config
    from k4d.errors import Cancelled

    bus, store = InProcessBus(), LocalStore(tmp_path)
    handled = []

    def handle(event, context):
        handled.append((context.job_id, event.spec.num_frames))
        if context.job_id == "job-raises":
            raise Cancelled("cancelled between steps")

    worker = StageWorker.for_stage(Config(), bus, store, "k4d.sim.requested", "g",
                                   stage="kinematics",
                                   event_type=events_pb2.SimulationRequested, handle=handle)
    consumer = bus.consumer([SIM_FAILED], "test")
    store.put_bytes(cancel_marker_key("job-marked"), b"")
    for job in ("job-live", "job-marked", "job-raises"):
        event = events_pb2.SimulationRequested(header=events_pb2.EventHeader(job_id=job))
        event.spec.num_frames = 5
        worker.handler(_message(event, key=job.encode()))
    assert handled == [("job-live", 5), ("job-raises", 5)]
    failed = [events_pb2.SimulationFailed.FromString(m.value) for m in consumer.poll(1.0, 10)]
    assert sorted((f.header.job_id, f.error.code, f.error.stage) for f in failed) == [
        ("job-marked", "CANCELLED", "kinematics"), ("job-raises", "CANCELLED", "kinematics")]
