"""Test support for real processes: `k4d up` as a user runs it, and process liveness.

- `k4d_up(services, log_dir, env)`: a context manager that starts `k4d up --base-port 0`
  (TLS and tokens on unless `insecure`), reads its table until "running" and yields
  `UpCluster` (service addresses, the client environment it printed, the operator token's
  file, the table), then stops it with Ctrl-C (SIGINT to its group);
- `alive(pid)`: running, where a zombie (dead, not yet reaped by whoever adopted it) is not.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from k4d.settings import current as current_settings


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True)
class UpCluster:
    addresses: dict[str, str]  # service -> host:port of its gRPC server
    client_env: dict[str, str]  # the given env plus what `clients: export ...` printed
    table: str  # everything `k4d up` printed until it was running
    operator_token: str = ""  # path `operator token: PATH` printed ("" with --insecure)

    def security(self, token: str | None = None):
        """ClientSecurity of the printed exports (the user's token), or of `token`."""
        from k4d.grpc_client import ClientSecurity

        printed = current_settings(self.client_env).runtime
        return ClientSecurity(tls_ca=printed.tls_ca,
                              token=printed.token if token is None else token)

    def operator(self):
        """ClientSecurity with the operator's token."""
        return self.security(Path(self.operator_token).read_text().strip())


@contextlib.contextmanager
def k4d_up(services: list[str], log_dir: Path, env: Mapping[str, str] | None = None,
           timeout_s: float = 240.0, insecure: bool = False) -> Iterator[UpCluster]:
    """`k4d up --base-port 0 --services ...` in a process group of its own, until the block
    ends; fails (AssertionError with its output) unless every service is healthy."""
    env = dict(os.environ if env is None else env)
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "k4d.cli.main", "up", "--base-port", "0", "--services",
         ",".join(services), "--log-dir", str(log_dir), "--timeout", str(int(timeout_s - 60)),
         *(["--insecure"] if insecure else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    lines, addresses, client_env, operator_token = [], {}, None, ""
    healthy = re.compile(rf"^({'|'.join(map(re.escape, services))})\s+grpc\s+(\S+)\s.*healthy$")
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            line = process.stdout.readline()
            lines.append(line)
            if match := healthy.match(line.strip()):
                addresses[match[1]] = match[2]
            if line.startswith("clients: export "):
                client_env = {**env, **dict(kv.split("=", 1) for kv in line.split()[2:])}
            if line.startswith("operator token: "):
                operator_token = line.removeprefix("operator token: ").strip()
            if line.startswith("k4d up: running"):
                break
        assert set(addresses) == set(services) and client_env, "".join(lines)
        yield UpCluster(addresses, client_env, "".join(lines), operator_token)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(60)
