"""Processes that die with their launcher: `k4d train --nproc N` -> torchrun agent -> workers.

torchrun starts each worker in a session of its own (`start_new_session=True`), so neither a
SIGKILL of `k4d train` nor one of the torchrun agent reached the workers: they kept training
into the run directory and published a model nobody was waiting for. Each process below the
launcher therefore asks the kernel for a parent-death signal (Linux `prctl(PR_SET_PDEATHSIG)`;
elsewhere a thread that watches `os.getppid()`):

- `python -m k4d_trainer.lifeline TORCHRUN_ARGS...` is the torchrun agent under the launcher;
  it records its own pid for the workers and runs torchrun in this process;
- `die_with_parent()` is the first thing a worker does.

The signal is SIGKILL: an abrupt end of the launcher (kill -9, the OOM killer) ends the run
as abruptly, and `--resume` continues from the newest committed checkpoint. A graceful stop
stays SIGTERM to the launcher, which forwards it (the ranks checkpoint, then stop).

torchrun's own SIGTERM handling gives the workers 30 s before it kills them, and a rank that
is mid-step on a loaded machine can need longer to reach its step boundary and checkpoint:
killed, it left status.json at `running` and no checkpoint of the step it stopped at. So the
agent takes SIGTERM itself (`graceful_stop`): it passes the signal to its workers, waits up to
`K4D_TRAIN_STOP_GRACE_S` for them to end, and only then shuts down as torchrun would.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from k4d.settings import current as current_settings

LAUNCHER_PID_ENV = "K4D_TRAIN_LAUNCHER_PID"  # set by `k4d train` for the torchrun agent
AGENT_PID_ENV = "K4D_TRAIN_AGENT_PID"  # set by the torchrun agent for its workers
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(expected_parent: int | None, sig: int = signal.SIGKILL) -> None:
    """Receive `sig` when the parent process exits.

    `expected_parent` is the pid the parent had when it started this process; if the parent
    is already gone (this process was re-parented before the signal was armed, the race the
    kernel API leaves open), `sig` is raised now. None: arm the signal without that check.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:  # no parent-death signal: poll for re-parenting instead
        parent = expected_parent or os.getppid()
        threading.Thread(target=_watch_parent, args=(parent, sig), daemon=True,
                         name="k4d-die-with-parent").start()
    if expected_parent is not None and os.getppid() != expected_parent:
        os.kill(os.getpid(), sig)


def _watch_parent(parent: int, sig: int, interval_s: float = 0.5) -> None:
    while os.getppid() == parent:
        time.sleep(interval_s)
    os.kill(os.getpid(), sig)


def worker_start() -> None:
    """In a torchrun worker: die with the agent. Workers that torchrun started without our
    agent (`torchrun --no-python k4d train` in a pod) still arm the signal, unchecked."""
    die_with_parent(current_settings().train.agent_pid)


def child_pids(pid: int | None = None) -> list[int] | None:
    """The children of process `pid` (this one by default), or None where the kernel does not
    list them (no /proc/PID/task/TID/children)."""
    tasks = Path(f"/proc/{pid or os.getpid()}/task")
    try:
        files = [task / "children" for task in tasks.iterdir()]
        return [int(child) for f in files if f.exists() for child in f.read_text().split()]
    except OSError:
        return None


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def graceful_stop(grace_s: float) -> bool:
    """In the torchrun agent, before torchrun starts: on SIGTERM, pass it to the workers and
    wait up to `grace_s` for them to end, then raise torchrun's SignalException (torchrun
    shuts down what is left). False, leaving torchrun's own handling, where this process's
    children cannot be listed."""
    if child_pids() is None:
        return False
    from torch.distributed.elastic.multiprocessing.api import SignalException

    stopping = []

    def on_sigterm(signum, _frame):
        if stopping:  # a repeated SIGTERM while the workers stop changes nothing
            return
        stopping.append(signum)
        workers = child_pids() or []
        for pid in workers:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        raise SignalException(f"Process {os.getpid()} got signal: {signum}",
                              sigval=signal.Signals(signum))

    signal.signal(signal.SIGTERM, on_sigterm)
    # torchrun installs its own handler, which replaces this one, for the signals in its
    # --signals-to-handle option (default SIGTERM,SIGINT,SIGHUP,SIGQUIT), whose default it
    # reads from PET_SIGNALS_TO_HANDLE. It copies the option into TORCHELASTIC_SIGNALS_TO_HANDLE
    # before starting the workers, so setting only that variable (as this once did) left
    # torchrun's 30 s handling in place, and a loaded machine's workers were killed mid-step.
    torchrun_signals = "SIGINT,SIGHUP,SIGQUIT"
    os.environ["PET_SIGNALS_TO_HANDLE"] = torchrun_signals
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = torchrun_signals  # torch without the option
    return True


def main(argv: list[str] | None = None) -> None:
    """The torchrun agent: die with the launcher, stop its workers gracefully on SIGTERM,
    then run torchrun here."""
    settings = current_settings().train
    die_with_parent(settings.launcher_pid)
    graceful_stop(settings.stop_grace_s)
    os.environ[AGENT_PID_ENV] = str(os.getpid())  # the workers inherit the agent's env
    from torch.distributed.run import main as torchrun_main

    torchrun_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
