"""Launchers: start a run, tell whether it is still going, stop it.

- `LocalLauncher` runs `k4d train --config CFG --out RUN_URI [--resume] --nproc N` as a
  subprocess (which runs torchrun for N > 1), in its own session,
  output to `<work_dir>/<job_id>/train.log`. It can adopt a run a previous trainer
  process started (same host, pid alive, its command line names the run).
- `KubernetesLauncher` creates the run's ConfigMap and PyTorchJob (`pytorchjob.render_run`)
  and reads the PyTorchJob's conditions.

The run's progress and result come from RUN_URI/status.json, never from the launcher;
the launcher only answers "has the process (or job) ended, and how".
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from k4d.config import ENV_VARS, Config
from k4d.errors import NotFound
from k4d.logs import get_logger
from k4d.settings import TrainerSettings

from k4d_trainer.control import pytorchjob
from k4d_trainer.control.spec import RunPlan

log = get_logger(__name__)
# The runtime settings a run inherits from the trainer's own Config.
_RUN_FIELDS = {"kafka_bootstrap", "store_uri", "s3_endpoint", "s3_access_key", "s3_secret_key",
               "s3_secure", "s3_region", "s3_part_size_bytes", "s3_retries", "log_level",
               "otel_exporter_otlp_endpoint", "otel_traces_exporter"}


@dataclass
class Launch:
    """One started run, persisted so a restarted trainer can follow or resume it."""

    job_id: str
    kind: str
    run_uri: str
    launches: int = 1
    pid: int = 0
    host: str = ""
    name: str = ""
    log_path: str = ""
    started_unix: float = 0.0
    # The trainer stopped this run itself (shutdown): resume it, whatever its status says.
    interrupted: bool = False

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Launch:
        raw = json.loads(data)
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


def run_env(config: Config) -> dict[str, str]:
    """K4D_* env vars carrying `config`'s runtime settings to a run (inverse of ENV_VARS)."""
    env = {}
    for var, (field, _parse) in ENV_VARS.items():
        if field in _RUN_FIELDS and var not in env:
            value = getattr(config, field)
            env[var] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return {k: v for k, v in env.items() if v != ""}


def k4d_command() -> list[str]:
    """How to run `k4d` from this interpreter (works without the console script on PATH)."""
    return [sys.executable, "-m", "k4d.cli.main"]


class LocalLauncher:
    kind = "local"

    def __init__(self, config: Config, settings: TrainerSettings, command: list[str] | None = None):
        self.work_dir = settings.work_dir
        self.command = command or k4d_command()
        self.env = {**os.environ, **run_env(config)}
        self._processes: dict[str, subprocess.Popen] = {}

    def argv(self, plan: RunPlan, run_uri: str, config_path: Path, resume: bool) -> list[str]:
        return [*self.command, "train", *pytorchjob.train_args(run_uri, str(config_path), resume),
                "--nproc", str(plan.nproc)]

    def launch(self, job_id: str, plan: RunPlan, run_uri: str, *, resume: bool,
               launches: int) -> Launch:
        job_dir = self.work_dir / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        config_path = job_dir / pytorchjob.CONFIG_FILE
        config_path.write_text(json.dumps(plan.config, indent=2, sort_keys=True))
        log_path = job_dir / "train.log"
        argv = self.argv(plan, run_uri, config_path, resume)
        with open(log_path, "ab") as log_file:
            log_file.write(f"--- launch {launches}: {' '.join(argv)}\n".encode())
            log_file.flush()
            # Own session: a Ctrl-C in the terminal reaches the trainer, which stops its runs
            # in order (SIGTERM: the run checkpoints) instead of killing them mid-write.
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT, env={**self.env, "K4D_TRAIN_JOB_ID": job_id},
                                       start_new_session=True)
        self._processes[job_id] = process
        log.info("training run started", extra={"job_id": job_id, "pid": process.pid,
                                                 "run_uri": run_uri, "log": str(log_path)})
        return Launch(job_id, self.kind, run_uri, launches=launches, pid=process.pid,
                      host=socket.gethostname(), log_path=str(log_path),
                      started_unix=time.time())

    def adopt(self, launch: Launch) -> bool:
        """Whether the run of a previous trainer process is still running here."""
        if launch.kind != self.kind or launch.host != socket.gethostname() or launch.pid <= 0:
            return False
        try:
            cmdline = Path(f"/proc/{launch.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return launch.run_uri.encode() in cmdline

    def exit_code(self, launch: Launch) -> int | None:
        """None while the run's process lives; its exit code (or -1 if unknown) after."""
        process = self._processes.get(launch.job_id)
        if process is not None:
            code = process.poll()
            if code is not None:
                self._processes.pop(launch.job_id, None)
            return code
        return None if self.adopt(launch) else -1

    def terminate(self, launch: Launch, grace_s: float = 30.0) -> None:
        """SIGTERM the run's process group (the run checkpoints and exits), SIGKILL after
        `grace_s`."""
        process = self._processes.get(launch.job_id)
        pid = process.pid if process is not None else launch.pid
        if process is None and not self.adopt(launch):
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if (process.poll() is not None) if process is not None else not self.adopt(launch):
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if process is not None:
                process.wait(10)
        self._processes.pop(launch.job_id, None)

    def log_tail(self, launch: Launch, lines: int = 15) -> str:
        try:
            text = Path(launch.log_path).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class KubernetesLauncher:
    kind = "kubernetes"

    def __init__(self, config: Config, settings: TrainerSettings, client=None):
        from k4d_trainer.control.kube import KubeClient

        self.settings = settings
        self.env = run_env(config)
        self.client = client or KubeClient.in_cluster()

    def render(self, job_id: str, plan: RunPlan, run_uri: str, launch: int = 1) -> list[dict]:
        s = self.settings
        return pytorchjob.render_run(job_id, plan, run_uri, namespace=s.namespace, image=s.image,
                                     nproc_per_node=s.nproc_per_node, env=self.env, launch=launch)

    def launch(self, job_id: str, plan: RunPlan, run_uri: str, *, resume: bool,
               launches: int) -> Launch:
        if launches > 1:  # the previous, failed job of this run (best effort)
            self.terminate(Launch(job_id, self.kind, run_uri,
                                  name=pytorchjob.object_name(job_id, launches - 1)))
        job, config_map = self.render(job_id, plan, run_uri, launches)
        created = self.client.create(job)
        self.client.create(pytorchjob.owned_by(config_map, created))
        name = pytorchjob.object_name(job_id, launches)
        log.info("PyTorchJob created", extra={"job_id": job_id, "name": name,
                                               "namespace": self.settings.namespace})
        return Launch(job_id, self.kind, run_uri, launches=launches, name=name,
                      started_unix=time.time())

    def adopt(self, launch: Launch) -> bool:
        return launch.kind == self.kind and self.exit_code(launch) is None

    def exit_code(self, launch: Launch) -> int | None:
        try:
            obj = self.client.get(pytorchjob.KIND, self.settings.namespace, launch.name)
        except NotFound:
            return -1
        outcome = pytorchjob.job_outcome(obj)
        return None if outcome is None else (0 if outcome == "succeeded" else 1)

    def terminate(self, launch: Launch, grace_s: float = 30.0) -> None:
        for kind in (pytorchjob.KIND, "ConfigMap"):
            self.client.delete(kind, self.settings.namespace, launch.name)

    def log_tail(self, launch: Launch, lines: int = 15) -> str:
        return f"(PyTorchJob {self.settings.namespace}/{launch.name}: kubectl logs -l " \
               f"k4d.io/job-id={launch.job_id})"


def build_launcher(config: Config, settings: TrainerSettings):
    if settings.launcher == "kubernetes":
        return KubernetesLauncher(config, settings)
    return LocalLauncher(config, settings)
