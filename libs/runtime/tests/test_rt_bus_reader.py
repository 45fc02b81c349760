"""Bus.reader: every partition from the beginning, no consumer group, and the end offsets /
positions that tell a folding process (the simulator's job feed) it has caught up.
In-process bus and the real Kafka-protocol broker."""

from __future__ import annotations

import time
import uuid

import pytest
from k4d.bus import InProcessBus


def _read_until_caught_up(reader, timeout_s: float = 30.0) -> list:
    ends, seen = reader.end_offsets(), []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen += reader.poll(0.2, max_records=100)
        positions = reader.positions()
        if all(positions[tp] >= end for tp, end in ends.items()):
            return seen
    raise AssertionError(f"reader did not catch up: {reader.positions()} < {ends}")


def _check(bus, topics):
    for i in range(30):
        bus.publish(topics[i % 2], f"key-{i}", f"v{i}".encode())
    first, second = bus.reader(topics), bus.reader(topics)
    try:
        ends = first.end_offsets()
        assert sum(ends.values()) == 30 and {tp[0] for tp in ends} == set(topics)
        # Two readers each see everything (no group splits the partitions between them).
        for reader in (first, second):
            values = sorted(m.value for m in _read_until_caught_up(reader))
            assert values == sorted(f"v{i}".encode() for i in range(30))
        bus.publish(topics[0], "late", b"late")
        assert [m.value for m in _read_until_caught_up(first)] == [b"late"]
    finally:
        first.close()
        second.close()


def test_in_process_reader():
    _check(InProcessBus(partitions=3), ["t.a", "t.b"])


@pytest.mark.integration
def test_kafka_reader(kafka_bus):
    run = uuid.uuid4().hex[:8]
    _check(kafka_bus, [f"reader-a-{run}", f"reader-b-{run}"])
