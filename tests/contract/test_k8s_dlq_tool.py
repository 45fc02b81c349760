"""The runbook's dead-letter tool (infra/tools/dlq.py): header handling, CLI errors, and a
round trip on the real Kafka-protocol broker: a failing stage worker dead-letters a message,
`show` lists it, `replay` republishes it once as a fresh first attempt."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from k4d.bus.base import (
    HEADER_ATTEMPT,
    HEADER_ERROR,
    HEADER_ERROR_TYPE,
    HEADER_ORIGINAL_TOPIC,
    Message,
    event_headers,
)
from k4d.bus.topics import dlq
from k4d.bus.worker import StageWorker
from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]


def _load_tool():
    return load_path_module(REPO / "infra/tools/dlq.py", "k4d_infra_dlq")


tool = _load_tool()


def _dead_letter(**headers) -> Message:
    base = {HEADER_ATTEMPT: b"3", HEADER_ERROR: b"TimeoutError: slow", HEADER_ERROR_TYPE: b"TimeoutError",
            "traceparent": b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k4d-job-id": b"j1"}
    base.update(headers)
    return Message("k4d.sim.projected.dlq", 0, 4, b"j1", b"payload", base)


def test_replay_headers_reset_the_attempt_and_drop_the_error():
    headers = tool.replay_headers(_dead_letter(**{HEADER_ORIGINAL_TOPIC: b"k4d.sim.projected"}))
    assert headers[HEADER_ATTEMPT] == b"1"
    assert HEADER_ERROR not in headers and HEADER_ERROR_TYPE not in headers
    assert HEADER_ORIGINAL_TOPIC not in headers
    assert headers["k4d-job-id"] == b"j1" and headers["traceparent"].startswith(b"00-0af7")


def test_original_topic_prefers_the_header():
    assert tool.original_topic(_dead_letter(**{HEADER_ORIGINAL_TOPIC: b"k4d.sim.kinematics"})) == \
        "k4d.sim.kinematics"
    assert tool.original_topic(_dead_letter()) == "k4d.sim.projected"


def test_cli_rejects_a_non_dlq_topic_and_a_missing_broker(monkeypatch, capsys):
    monkeypatch.delenv("K4D_KAFKA_BOOTSTRAP", raising=False)
    with pytest.raises(SystemExit):
        tool.main(["show", "k4d.sim.projected.dlq"])
    assert "no broker" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--bootstrap", "127.0.0.1:1", "replay", "k4d.sim.projected"])
    assert "not a dead-letter topic" in capsys.readouterr().err


@pytest.mark.integration
def test_show_and_replay_on_the_real_broker(kafka_bus, capsys):
    topic = f"dlq-tool-{uuid.uuid4().hex[:8]}"
    kafka_bus.publish(topic, "job-7", b"payload", event_headers("job-7"))

    def failing(message):
        raise TimeoutError("generator unavailable")

    stop = threading.Event()
    worker = StageWorker(kafka_bus, topic, f"g-{topic}", failing, max_attempts=1, poll_timeout_s=0.2)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        shown = tool.show(kafka_bus, dlq(topic), limit=1, idle_s=30)
    finally:
        stop.set()
        thread.join(15)
    assert len(shown) == 1 and shown[0].header(HEADER_ERROR_TYPE) == "TimeoutError"
    assert "job=job-7" in capsys.readouterr().out

    assert tool.replay(kafka_bus, dlq(topic), idle_s=4) == 1
    with kafka_bus.consumer(topic, f"check-{topic}") as reader:
        received = []
        for _ in range(60):
            received += reader.poll(0.5, max_records=10)
            if len(received) >= 2:
                break
    original, replayed = sorted(received, key=lambda m: m.offset)
    assert replayed.value == original.value == b"payload" and replayed.job_id == "job-7"
    assert replayed.attempt == 1 and replayed.header(HEADER_ERROR) is None
    # Committed in the replay group: running the tool again replays nothing.
    assert tool.replay(kafka_bus, dlq(topic), idle_s=8) == 0
