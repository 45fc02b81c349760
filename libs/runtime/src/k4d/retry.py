"""Retries with exponential backoff, shared by the object store and the stage worker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def backoff_delay(attempt: int, base_s: float, max_s: float) -> float:
    """Delay before retry number `attempt` (1-based): base * 2**(attempt-1), capped."""
    return min(max_s, base_s * (2 ** max(0, attempt - 1)))


def call_with_retries(fn: Callable[[], T], *, is_transient: Callable[[BaseException], bool],
                      attempts: int, base_delay_s: float = 0.2, max_delay_s: float = 5.0,
                      sleep: Callable[[float], None] = time.sleep,
                      on_retry: Callable[[int, BaseException], None] | None = None) -> T:
    """Call `fn`; on a transient error sleep and try again, up to `attempts` calls in all.
    The last transient error (or any non-transient one) propagates unchanged."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt >= attempts or not is_transient(exc):
                raise
            if on_retry is not None:
                on_retry(attempt, exc)
            sleep(backoff_delay(attempt, base_delay_s, max_delay_s))
    raise AssertionError("unreachable: attempts must be >= 1")
