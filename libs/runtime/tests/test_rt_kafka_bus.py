"""Kafka bus against a real Kafka-protocol broker (tansu) started by the test run."""

import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from k4d.bus import HEADER_ATTEMPT, HEADER_ERROR_TYPE, StageWorker, dlq, event_headers
from k4d.testing.pytest_plugin import TEST_MAX_POLL_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS

pytestmark = pytest.mark.integration


def unique(name: str) -> str:
    return f"test.{name}.{uuid.uuid4().hex[:8]}"


def drain(consumer, n, timeout_s=20.0):
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += consumer.poll(0.5, max_records=n - len(out))
    return out


def test_produce_consume_commit(kafka_bus):
    topic, group = unique("basic"), unique("group")
    kafka_bus.ensure_topics([topic])
    kafka_bus.ensure_topics([topic])  # existing topic: fine
    for i in range(3):
        kafka_bus.publish(topic, "job-1", f"m{i}".encode(), event_headers("job-1"))
    with kafka_bus.consumer(topic, group) as consumer:
        messages = drain(consumer, 3)
        assert [m.value for m in messages] == [b"m0", b"m1", b"m2"]
        assert all(m.job_id == "job-1" and m.attempt == 1 and m.key == b"job-1" for m in messages)
        consumer.commit(messages[-1])
    kafka_bus.publish(topic, "job-1", b"m3")
    with kafka_bus.consumer(topic, group) as consumer:  # resumes after the commit
        assert [m.value for m in drain(consumer, 1)] == [b"m3"]


def test_consumer_closed_before_commit_redelivers_to_the_group(kafka_bus):
    topic, group = unique("redeliver"), unique("group")
    for i in range(2):
        kafka_bus.publish(topic, None, f"m{i}".encode())
    first = kafka_bus.consumer(topic, group)
    got = drain(first, 2)
    first.commit(got[0])
    first.close()  # m1 was never committed
    with kafka_bus.consumer(topic, group) as second:
        assert [m.value for m in drain(second, 1)] == [b"m1"]


CRASHING_WORKER = textwrap.dedent("""
    import os, signal, sys, threading
    from k4d.bus import StageWorker
    from k4d.bus.kafka import KafkaBus
    bootstrap, topic, group, marker = sys.argv[1:5]
    bus = KafkaBus(bootstrap, session_timeout_ms={session}, max_poll_interval_ms={poll})
    def handler(message):
        open(marker, "wb").write(message.value)
        os.kill(os.getpid(), signal.SIGKILL)  # die after the work, before the commit
    StageWorker(bus, topic, group, handler).run(threading.Event())
""").format(session=TEST_SESSION_TIMEOUT_MS, poll=TEST_MAX_POLL_INTERVAL_MS)


def test_killed_worker_leaves_the_message_to_the_group(kafka_bus, kafka_broker, tmp_path):
    topic, group = unique("crash"), unique("group")
    kafka_bus.publish(topic, "job-9", b"work", event_headers("job-9"))
    marker = tmp_path / "handled"
    proc = subprocess.run([sys.executable, "-c", CRASHING_WORKER, kafka_broker, topic, group, str(marker)],
                          timeout=60, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert marker.read_bytes() == b"work"
    handled = threading.Event()
    seen = []

    def handler(message):
        seen.append((message.value, message.job_id))
        handled.set()

    stop = threading.Event()
    worker = StageWorker(kafka_bus, topic, group, handler, poll_timeout_s=0.2)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        assert handled.wait(30), "the killed worker's message was not redelivered"
    finally:
        stop.set()
        thread.join(15)
    assert seen == [(b"work", "job-9")]


def test_dead_letter_after_max_attempts(kafka_bus):
    topic, group = unique("dlq"), unique("group")
    attempts = []

    def handler(message):
        attempts.append(message.attempt)
        raise TimeoutError("downstream did not answer")

    kafka_bus.publish(topic, "job-3", b"payload", event_headers("job-3"))
    stop = threading.Event()
    worker = StageWorker(kafka_bus, topic, group, handler, max_attempts=2, backoff_s=0.05, poll_timeout_s=0.2)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        with kafka_bus.consumer(dlq(topic), unique("dlq-reader")) as reader:
            dead = drain(reader, 1, timeout_s=30)
    finally:
        stop.set()
        thread.join(15)
    assert attempts == [1, 2]
    [letter] = dead
    assert letter.value == b"payload" and letter.job_id == "job-3"
    assert letter.header(HEADER_ATTEMPT) == "2" and letter.header(HEADER_ERROR_TYPE) == "TimeoutError"
