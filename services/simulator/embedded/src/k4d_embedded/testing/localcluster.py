"""A local pipeline cluster for e2e tests and benchmarks: a Kafka-protocol broker and an
S3 server (started elsewhere, e.g. by the runtime's pytest fixtures or `k4d up`) plus every
service as a subprocess (`k4d serve <name> [--worker]`) configured only by env vars, with
TLS and tokens on as under `k4d up` (the same local credentials). Processes can be
SIGKILLed and restarted to exercise redelivery.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
from k4d import local_servers
from k4d.grpc_client import ClientSecurity, create_channel, wait_healthy
from k4d.local_credentials import ensure_local_credentials
from k4d.pipeline_topology import OPERATOR

STAGE_SERVICES = ("kinematics", "projection", "generator")
TINY_CLIP = {"frames": 5, "downscale": 15}  # 480x720 / 15 = 32x48, the tiny model's size
SESSION_TIMEOUT_MS = 3000
SIMULATOR_SERVICE = "kinema4d.v1.SimulatorService"


def run_k4d(*args: str, env: dict | None = None, timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, "-m", "k4d.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"k4d {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class Cluster:
    """Starts, kills and restarts service processes sharing one broker, bucket, model."""

    def __init__(self, broker: str, s3, log_dir: Path, model_dir: Path):
        self.broker, self.s3, self.log_dir, self.model_dir = broker, s3, log_dir, model_dir
        self.bucket = f"k4d-e2e-{uuid.uuid4().hex[:10]}"
        self.processes: dict[str, local_servers.ManagedProcess] = {}
        self.ports: dict[str, int] = {}
        self._starts: dict[str, int] = {}
        self.credentials = ensure_local_credentials(log_dir / "credentials")

    def env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "K4D_GRPC_HOST": "127.0.0.1", "K4D_GRPC_PORT": str(self.ports[name]),
            "K4D_METRICS_PORT": "0", "K4D_KAFKA_BOOTSTRAP": self.broker,
            "K4D_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "K4D_KAFKA_MAX_POLL_INTERVAL_MS": "60000",
            "K4D_STORE_URI": f"s3://{self.bucket}", "K4D_S3_ENDPOINT": self.s3.endpoint,
            "K4D_S3_ACCESS_KEY": self.s3.access_key, "K4D_S3_SECRET_KEY": self.s3.secret_key,
            "K4D_S3_REGION": self.s3.region, "K4D_S3_SECURE": "0",
            "K4D_WORKER_MAX_ATTEMPTS": "3", "K4D_WORKER_BACKOFF_S": "0.2",
            "K4D_LOG_LEVEL": "INFO", "OTEL_SERVICE_NAME": name, "OMP_NUM_THREADS": "1",
            **self.credentials.server_env(),
        })
        if name == "simulator":  # every open Watch stream holds a server thread
            env["K4D_GRPC_MAX_WORKERS"] = "64"
        return env

    def start(self, name: str, worker: bool = True, timeout_s: float = 120) -> None:
        self.ports.setdefault(name, local_servers.free_port())
        argv = [sys.executable, "-m", "k4d.cli.main", "serve", name]
        if worker:
            argv.append("--worker")
        self._starts[name] = self._starts.get(name, 0) + 1
        process = local_servers.spawn(f"{name}-{self._starts[name]}", argv,
                                      f"127.0.0.1:{self.ports[name]}", self.log_dir,
                                      env=self.env(name))
        self.processes[name] = process
        # The simulator front door is ready once its job feed has caught up (its own
        # health entry); the stage services once their server runs.
        service = SIMULATOR_SERVICE if name == "simulator" else ""
        if not wait_healthy(process.address, service, timeout_s,
                            should_abort=lambda: not process.alive(),
                            security=ClientSecurity(tls_ca=str(self.credentials.ca))):
            raise RuntimeError(f"{name} did not become healthy:\n{process.log_tail(40)}")

    def kill(self, name: str) -> None:
        """SIGKILL: no drain, no commit; its uncommitted messages are redelivered."""
        process = self.processes[name]
        os.killpg(process.popen.pid, signal.SIGKILL)
        process.popen.wait(10)

    def stop_all(self) -> None:
        local_servers.stop_all(list(self.processes.values()), 10)

    def security(self, role: str = OPERATOR) -> ClientSecurity:
        """TLS to this cluster with `role`'s token."""
        return ClientSecurity(tls_ca=str(self.credentials.ca), token=self.credentials.token(role))

    def channel(self, role: str = OPERATOR) -> grpc.Channel:
        """A channel to the simulator front door as `role` (default: an operator)."""
        return create_channel(f"127.0.0.1:{self.ports['simulator']}", tracing=False,
                              security=self.security(role))

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- {n} ---\n{p.log_tail(lines)}" for n, p in self.processes.items())


def example_spec(example_dir: Path, model_dir: Path | None, *, steps: int = 2, seed: int = 42,
                 frames: int | None = None, downscale: int | None = None):
    """The shipped example (default: at the tiny model's clip size) as a SimulationSpec."""
    from k4d_embedded.inputs import SimulationInputs, build_spec

    return build_spec(SimulationInputs(
        robot="panda", actions=example_dir / "actions.json", image=example_dir / "scene.png",
        camera=example_dir / "camera.json", model=str(model_dir) if model_dir else "",
        steps=steps, seed=seed, frames=frames or TINY_CLIP["frames"],
        downscale=downscale or TINY_CLIP["downscale"]))


def unreachable_example(directory: Path, example_dir: Path) -> Path:
    """A copy of an example whose last three end-effector targets are 1.6 m out, beyond
    the Panda's reach: IK misses there and the rollout still runs (stage outcomes tests)."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    for name in ("scene.png", "camera.json"):
        shutil.copy(example_dir / name, directory / name)
    actions = json.loads((example_dir / "actions.json").read_text())
    for step in actions["steps"][-3:]:
        step[0] = 1.6
    (directory / "actions.json").write_text(json.dumps(actions))
    return directory


def wait_terminal(stub, job_ids, timeout_s: float):
    """job id -> final Job; raises with the non-terminal ones on timeout."""
    from k4d_simulator import is_terminal
    from kinema4d.v1 import simulator_pb2

    final, deadline = {}, time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(final) < len(job_ids):
        for job_id in job_ids:
            if job_id not in final:
                job = stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job
                if is_terminal(job.state):
                    final[job_id] = job
        time.sleep(0.25)
    missing = [j for j in job_ids if j not in final]
    if missing:
        states = {j: simulator_pb2.JobState.Name(stub.Get(simulator_pb2.GetRequest(
            job_id=j)).job.state) for j in missing}
        raise AssertionError(f"{len(missing)} jobs not terminal after {timeout_s} s: "
                             f"{json.dumps(states)[:2000]}")
    return final
