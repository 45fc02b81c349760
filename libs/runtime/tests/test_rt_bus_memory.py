"""In-process bus: Kafka group semantics, and the StageWorker's retry/DLQ/stop behaviour."""

import threading
import time

import pytest
from k4d.bus import (
    HEADER_ATTEMPT,
    HEADER_ERROR,
    HEADER_ERROR_TYPE,
    HEADER_ORIGINAL_TOPIC,
    CommitFailed,
    InProcessBus,
    StageWorker,
    dlq,
    event_headers,
    open_bus,
    topics,
)
from k4d.config import load_config
from k4d.errors import InvalidArgument


def drain(consumer, n, timeout_s=2.0):
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += consumer.poll(0.05, max_records=n - len(out))
    return out


def test_publish_consume_commit_headers():
    bus = InProcessBus()
    bus.publish("t", "job-1", b"v1", event_headers("job-1"))
    consumer = bus.consumer("t", "g")
    [message] = drain(consumer, 1)
    assert (message.value, message.key, message.job_id, message.attempt) == (b"v1", b"job-1", "job-1", 1)
    consumer.commit(message)
    assert bus.committed("g", "t") == 1
    assert consumer.poll(0.05) == []


def test_uncommitted_messages_go_to_the_next_group_member():
    bus = InProcessBus()
    for i in range(3):
        bus.publish("t", None, f"m{i}".encode())
    first = bus.consumer("t", "g")
    got = drain(first, 3)
    first.commit(got[0])
    first.close()  # dies before committing m1, m2
    second = bus.consumer("t", "g")
    assert [m.value for m in drain(second, 2)] == [b"m1", b"m2"]


def test_groups_are_independent_and_latest_skips_history():
    bus = InProcessBus()
    bus.publish("t", None, b"old")
    assert [m.value for m in drain(bus.consumer("t", "a"), 1)] == [b"old"]
    assert [m.value for m in drain(bus.consumer("t", "b"), 1)] == [b"old"]
    late = bus.consumer("t", "c", from_beginning=False)
    assert late.poll(0.05) == []
    bus.publish("t", None, b"new")
    assert [m.value for m in drain(late, 1)] == [b"new"]


def test_partitions_are_shared_between_members_and_only_owners_commit():
    bus = InProcessBus(partitions=2)
    a = bus.consumer("t", "g")
    b = bus.consumer("t", "g")
    for key in ("k1", "k2", "k3", "k4"):
        bus.publish("t", key, key.encode())
    got_a, got_b = drain(a, 4, 0.3), drain(b, 4, 0.3)
    assert len(got_a) + len(got_b) == 4 and got_a and got_b
    assert {m.partition for m in got_a}.isdisjoint({m.partition for m in got_b})
    b.close()  # a now owns both partitions, starting from the (empty) committed offsets
    assert len(drain(a, 4)) == 4
    with pytest.raises(CommitFailed):
        b.commit(got_b[0])


def test_poll_wakes_up_on_publish():
    bus = InProcessBus()
    consumer = bus.consumer("t", "g")
    threading.Timer(0.1, bus.publish, ("t", None, b"late")).start()
    started = time.monotonic()
    assert [m.value for m in consumer.poll(5.0)] == [b"late"]
    assert time.monotonic() - started < 2.0


def test_open_bus_in_process_without_bootstrap():
    assert isinstance(open_bus(load_config(env={})), InProcessBus)
    assert topics.dlq(topics.SIM_REQUESTED) == "k4d.sim.requested.dlq"
    assert len(set(topics.ALL_TOPICS)) == 9


def run_worker_until(worker, done, timeout_s=5.0):
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        assert done.wait(timeout_s), "worker did not reach the expected state in time"
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_worker_commits_after_handler_and_forwards():
    bus = InProcessBus()
    done = threading.Event()

    def handler(message):
        bus.publish("out", message.key, message.value.upper(), event_headers(message.job_id))
        done.set()

    bus.publish("in", "j1", b"payload", event_headers("j1"))
    run_worker_until(StageWorker(bus, "in", "stage", handler, poll_timeout_s=0.05), done)
    assert bus.committed("stage", "in") == 1
    [out] = drain(bus.consumer("out", "check"), 1)
    assert out.value == b"PAYLOAD" and out.job_id == "j1"


def test_worker_retries_with_attempt_header_then_dead_letters():
    bus = InProcessBus()
    attempts, dead = [], threading.Event()

    def handler(message):
        attempts.append(message.attempt)
        raise RuntimeError(f"broken on attempt {message.attempt}")

    bus.publish("in", "j2", b"x", event_headers("j2"))
    dlq_consumer = bus.consumer(dlq("in"), "dlq-reader")
    worker = StageWorker(bus, "in", "stage", handler, max_attempts=3, backoff_s=0.01, poll_timeout_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        [dead_letter] = drain(dlq_consumer, 1, timeout_s=5)
        dead.set()
    finally:
        stop.set()
        thread.join(5)
    assert attempts == [1, 2, 3]
    assert dead_letter.header(HEADER_ATTEMPT) == "3" and dead_letter.job_id == "j2"
    assert dead_letter.header(HEADER_ERROR) == "RuntimeError: broken on attempt 3"
    assert dead_letter.header(HEADER_ERROR_TYPE) == "RuntimeError"
    assert dead_letter.header(HEADER_ORIGINAL_TOPIC) == "in"
    assert bus.end_offsets("in") == [3] and bus.committed("stage", "in") == 3


def test_bad_input_goes_to_the_dlq_without_retries():
    bus = InProcessBus()
    calls = []

    def handler(message):
        calls.append(message.attempt)
        raise InvalidArgument.for_field("joints", "wrong shape")

    bus.publish("in", None, b"x")
    dlq_consumer = bus.consumer(dlq("in"), "r")
    worker = StageWorker(bus, "in", "stage", handler, max_attempts=5, backoff_s=0.01, poll_timeout_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    [dead_letter] = drain(dlq_consumer, 1)
    stop.set()
    thread.join(5)
    assert calls == [1] and dead_letter.header(HEADER_ERROR_TYPE) == "InvalidArgument"


def test_stop_finishes_the_current_message_and_commits():
    bus = InProcessBus()
    entered, release = threading.Event(), threading.Event()

    def slow_handler(message):
        entered.set()
        release.wait(5)

    bus.publish("in", None, b"x")
    stop = threading.Event()
    worker = StageWorker(bus, "in", "stage", slow_handler, poll_timeout_s=0.05)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    assert entered.wait(5)
    stop.set()  # stop requested while the handler runs
    time.sleep(0.1)
    assert thread.is_alive()
    release.set()
    thread.join(5)
    assert not thread.is_alive() and bus.committed("stage", "in") == 1


def test_worker_from_config_takes_attempts_and_backoff():
    config = load_config(env={"K4D_WORKER_MAX_ATTEMPTS": "7", "K4D_WORKER_BACKOFF_S": "0.25"})
    worker = StageWorker.from_config(config, InProcessBus(), ["a", "b"], "g", lambda m: None)
    assert (worker.max_attempts, worker.backoff_s, worker.topics) == (7, 0.25, ["a", "b"])
