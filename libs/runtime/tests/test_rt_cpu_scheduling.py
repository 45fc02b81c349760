"""k4d.cpu_scheduling: native code that changes the thread's scheduling policy (SVT-AV1 as
root raises it to real time) is undone on leaving the block (the suite-wide guard in
k4d.testing.pytest_plugin checks every test end to end)."""

import os

import pytest
from k4d import cpu_scheduling


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="Linux scheduling API")
def test_the_policy_on_entry_is_kept():
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    with cpu_scheduling.kept():
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # what an encoder might do
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == before


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="Linux scheduling API")
def test_restore_says_what_it_found():
    before = cpu_scheduling.current()
    assert cpu_scheduling.restore(before) is None
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    assert cpu_scheduling.restore(before)[0] == os.SCHED_BATCH
    assert cpu_scheduling.current() == before
