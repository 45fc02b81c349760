"""Bus helpers for tests of stage workers."""

from __future__ import annotations

import time

from k4d.bus.base import Bus, Message


def drain(bus: Bus, topic: str, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Read `topic` from its beginning in a fresh group until `count` messages arrived or
    `timeout_s` passed (the caller asserts on what came back)."""
    deadline = time.monotonic() + timeout_s
    out: list[Message] = []
    with bus.consumer([topic], f"test-drain-{topic}-{time.time_ns()}") as consumer:
        while len(out) < count and time.monotonic() < deadline:
            out += consumer.poll(0.2, max_records=10)
    return out
