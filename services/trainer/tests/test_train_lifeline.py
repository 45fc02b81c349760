"""`k4d_trainer.lifeline`: a process armed with `die_with_parent` ends when its parent ends,
including when the parent was already gone before the signal was armed (the race the
kernel API leaves open). The torchrun path end to end: test_train_run.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from k4d.testing.processes import alive

# A parent that starts an armed child, prints the child's pid, then sleeps.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(120)
"""
CHILD = """
import os, time
from k4d_trainer.lifeline import die_with_parent
die_with_parent(os.getppid())
time.sleep(120)
"""


def test_the_child_dies_with_its_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    child = int(parent.stdout.readline())
    try:
        time.sleep(1.0)  # the child has armed its signal (it imports little)
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        for pid in (parent.pid, child):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_parent_gone_before_arming_is_noticed():
    # Expecting a parent that is not ours stands for "re-parented before prctl ran".
    code = ("import os, time\nfrom k4d_trainer.lifeline import die_with_parent\n"
            "die_with_parent(os.getppid() + 1_000_000)\ntime.sleep(60)\n")
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == -signal.SIGKILL


def test_the_expected_parent_keeps_the_childalive():
    code = ("import os\nfrom k4d_trainer.lifeline import die_with_parent\n"
            "die_with_parent(os.getppid())\nprint('armed')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "armed", done.stderr
