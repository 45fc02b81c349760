"""The simulator's JobFeed over the real Kafka-protocol broker: a second feed (a restarted
simulator) rebuilds the same table by replaying the topics, and dead letters become
SimulationFailed events naming the stage.

The test runs its own broker: on the session broker, stage workers of the e2e cluster
(if that fixture is up) would consume these hand-made events and answer them."""

from __future__ import annotations

import time

import pytest
from k4d import local_servers
from k4d.bus import dlq, event_headers
from k4d.bus.kafka import KafkaBus
from k4d_simulator import events as ev
from k4d_simulator.feed import JobFeed
from k4d_simulator.jobs import JobTable
from kinema4d.v1 import events_pb2, simulator_pb2

pytestmark = pytest.mark.integration
S = simulator_pb2.JobState


def _wait(predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def kafka_bus(tmp_path):
    broker = local_servers.start_broker(log_dir=tmp_path / "broker")
    bus = KafkaBus(broker.address, client_id="k4d-feed-test", session_timeout_ms=3000,
                   max_poll_interval_ms=6000)
    yield bus
    bus.close()
    broker.stop()


def test_feed_replays_into_an_identical_table_and_bridges_dead_letters(kafka_bus):
    run = f"{time.monotonic_ns():x}"
    done, failed = f"kafka-done-{run}", f"kafka-dlq-{run}"
    for job_id in (done, failed):
        kafka_bus.publish(ev.TOPIC_REQUESTED, job_id, events_pb2.SimulationRequested(
            header=ev.header(job_id, "submit")).SerializeToString(),
            event_headers(job_id, **{ev.HEADER_IDEMPOTENCY_KEY: f"key-{job_id}"}))
    kafka_bus.publish(ev.TOPIC_KINEMATICS, done, events_pb2.KinematicsCompleted(
        header=ev.header(done, "kinematics")).SerializeToString(), event_headers(done))
    completed = events_pb2.SimulationCompleted(
        header=ev.header(done, "generation"),
        result=simulator_pb2.SimulationResult(rgb_video_uri="s3://b/jobs/x/generation/rgb.mp4"))
    for _ in range(2):  # a redelivered generation completes twice
        kafka_bus.publish(ev.TOPIC_COMPLETED, done, completed.SerializeToString(),
                          event_headers(done))
    headers = event_headers(failed, 3)
    headers.update({"k4d-error": b"ResourceExhausted: too big", "k4d-error-type":
                    b"ResourceExhausted"})
    kafka_bus.publish(dlq(ev.TOPIC_KINEMATICS), failed, b"payload", headers)

    first = JobTable()
    feed = JobFeed(kafka_bus, first).start()
    try:
        assert _wait(lambda: done in first and failed in first
                     and first.get(done).state == S.JOB_STATE_SUCCEEDED
                     and first.get(failed).state == S.JOB_STATE_FAILED)
    finally:
        feed.stop()
    error = first.get(failed).error
    assert error.stage == "projection" and error.code == "RESOURCE_EXHAUSTED"
    assert first.counts(done)[0] == 2

    replayed = JobTable()  # a restarted simulator: new group, from the beginning
    feed = JobFeed(kafka_bus, replayed).start()
    try:
        assert _wait(lambda: all(j in replayed and replayed.get(j) == first.get(j)
                                 for j in (done, failed)))
    finally:
        feed.stop()
