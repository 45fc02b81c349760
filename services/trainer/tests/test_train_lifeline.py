"""`k4d_trainer.lifeline`: a process armed with `die_with_parent` ends when its parent ends,
including when the parent was already gone before the signal was armed (the race the
kernel API leaves open), and the agent, not torchrun, handles SIGTERM under a real torchrun.
The training path end to end: test_train_run.py."""

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


# An agent that stops its worker gracefully: argv grace_s, then the worker's code; prints
# the worker's pid, then how the stop ended.
AGENT = """
import subprocess, sys, time
from k4d_trainer.lifeline import graceful_stop
from torch.distributed.elastic.multiprocessing.api import SignalException
assert graceful_stop(float(sys.argv[1]))
worker = subprocess.Popen([sys.executable, "-c", sys.argv[2]], start_new_session=True,
                          stdout=subprocess.DEVNULL)
print(worker.pid, flush=True)
try:
    time.sleep(120)
except SignalException as exc:
    print("signal", int(exc.sigval), "worker", "ended" if worker.poll() is not None
          else "running", flush=True)
"""
# A worker that needs `seconds` after a SIGTERM to stop (say, to finish a step and checkpoint)
SLOW_WORKER = """
import signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    time.sleep(0.05)
time.sleep({seconds})
"""


def _stop_an_agent(grace_s: float, worker_seconds: float) -> tuple[str, float]:
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(grace_s),
                              SLOW_WORKER.format(seconds=worker_seconds)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(agent.stdout.readline())
    try:
        time.sleep(1.0)  # the worker has installed its handler (it imports nothing)
        start = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=60)
        return out.strip(), time.monotonic() - start
    finally:
        for pid in (agent.pid, worker):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_to_the_agent_waits_for_the_workers_to_stop():
    """torchrun would kill a worker 30 s after a SIGTERM; the agent waits for it to end (up to
    the grace), then shuts down as torchrun does (SignalException)."""
    out, seconds = _stop_an_agent(grace_s=30.0, worker_seconds=2.0)
    assert out == f"signal {int(signal.SIGTERM)} worker ended"
    assert 2.0 <= seconds < 30.0


def test_a_worker_that_outlasts_the_grace_is_left_to_torchrun():
    out, seconds = _stop_an_agent(grace_s=1.0, worker_seconds=60.0)
    assert out == f"signal {int(signal.SIGTERM)} worker running"
    assert 1.0 <= seconds < 30.0


# A torchrun worker that, after a SIGTERM, needs 4 s to stop (a step and a checkpoint on a
# loaded machine) and then marks that it stopped in order: argv the marker file.
TORCHRUN_WORKER = """
import os, pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
marker.with_suffix(".ready").write_text(str(os.getpid()))
while not stop:
    time.sleep(0.05)
time.sleep(4)
marker.write_text("stopped in order")
"""


def test_real_torchrun_leaves_sigterm_to_the_agent(tmp_path):
    """Under torchrun itself (which installs its own SIGTERM handler when it starts the
    workers): with its shutdown wait cut to 1 s, a worker needing 4 s still stops in order,
    because the agent's graceful stop, not torchrun's, handles the SIGTERM. torchrun 2.13
    overwrote the environment variable that once asked it to leave SIGTERM alone."""
    worker, marker = tmp_path / "worker.py", tmp_path / "stopped"
    ready = marker.with_suffix(".ready")
    worker.write_text(TORCHRUN_WORKER)
    env = dict(os.environ, K4D_TRAIN_STOP_GRACE_S="30")
    env.pop("K4D_TRAIN_LAUNCHER_PID", None)
    agent = subprocess.Popen(
        [sys.executable, "-m", "k4d_trainer.lifeline", "--nproc-per-node=1", "--standalone",
         "--shutdown-timeout=1", str(worker), str(marker)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            assert agent.poll() is None, agent.stdout.read()[-3000:]
            time.sleep(0.1)
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=60)
        assert marker.exists(), out[-3000:]
        assert marker.read_text() == "stopped in order"
    finally:  # torchrun starts its worker in a session of its own: kill both
        worker_pid = ready.read_text() if ready.exists() else ""
        for pid in [agent.pid, *([int(worker_pid)] if worker_pid else [])]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
