"""The calling thread's CPU scheduling policy, kept across native code that changes it.

SVT-AV1, run as root, raises the thread that starts its encoder to SCHED_FIFO priority 99;
every thread and process started from that thread afterwards inherits it, and two busy
real-time processes on a small machine starve everything else (a test run hung that way).
Where the OS has no scheduling API (not Linux) there is nothing to keep.
"""

from __future__ import annotations

import contextlib
import os

Policy = tuple[int, os.sched_param] | None  # (policy, parameters); None: no scheduling API


def current() -> Policy:
    if not hasattr(os, "sched_getscheduler"):
        return None
    return os.sched_getscheduler(0), os.sched_getparam(0)


def restore(policy: Policy) -> Policy:
    """Puts the calling thread back on `policy`; returns the policy it found instead, or None
    when nothing had changed."""
    found = current()
    if policy is None or found == policy:
        return None
    os.sched_setscheduler(0, *policy)
    return found


@contextlib.contextmanager
def kept():
    """The calling thread's policy as it was on entry, whatever the block does to it."""
    policy = current()
    try:
        yield
    finally:
        restore(policy)
