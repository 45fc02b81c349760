"""`k4d up`: broker + S3 server + every installed service as loopback subprocesses.

Secure by default: the services serve TLS with a certificate of a CA made in the state
directory and check bearer tokens (a user, an operator and a service token, also there;
k4d.local_credentials). The `clients: export ...` line gives the CA and the user's token;
`operator token: PATH` the operator's. `--insecure` turns both off and says so."""

from __future__ import annotations

import math
import os
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from k4d import local_servers
from k4d.config import SERVICE_PORTS
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d.settings import current as current_settings

# Hooks other packages add to `k4d up` (entry points): `default_model(store) -> (reference,
# what happened)` publishes the model a spec without one runs (the embedded runner's:
# k4d_embedded.up_model), so the runtime itself imports no model library.
UP_HOOKS = "k4d.up"
SIMULATOR_DEFAULT_MODEL_ENV = "K4D_SIMULATOR_DEFAULT_MODEL"
LOCAL_BUCKET = "k4d"
STANDARD_BROKER_PORT = 9092
STANDARD_S3_PORT = 9000
CHILD_GRACE_S = 10.0
# Consumer group session timeout for the services and clients of the local broker: tansu
# answers a new member's join after about half of it (ADR 013), so 6 s joins in ~3 s where
# the runtime's 10 s default takes 5 s and librdkafka's 45 s default 23 s.
LOCAL_SESSION_TIMEOUT_MS = 6000


@dataclass(frozen=True)
class UpOptions:
    check: bool = False
    base_port: int | None = None
    services: list[str] | None = None
    workers: bool = True
    timeout_s: float = 90.0
    log_dir: str | None = None  # the state directory: logs, CA, certificates, tokens
    insecure: bool = False      # no TLS, no tokens


@dataclass(frozen=True)
class PortPlan:
    broker: int
    s3: int
    services: dict[str, tuple[int, int]]  # name -> (grpc, metrics)


def plan_ports(base_port: int | None, services: list[str]) -> PortPlan:
    """Standard ports by default; a block from `base_port`; any free ports for 0."""
    if base_port is None:
        extra = {n: (0, 0) for n in services if n not in SERVICE_PORTS}
        plan = PortPlan(STANDARD_BROKER_PORT, STANDARD_S3_PORT,
                        {n: SERVICE_PORTS.get(n, (0, 0)) for n in services})
        if extra:  # a service without a standard port gets free ones
            plan.services.update({n: (local_servers.free_port(), local_servers.free_port()) for n in extra})
        return plan
    if base_port == 0:
        free = local_servers.free_port
        return PortPlan(free(), free(), {n: (free(), free()) for n in services})
    if not 1024 <= base_port <= 65535 - 40:
        raise InvalidArgument.for_field("--base-port", f"must be 0 or in 1024..65495, got {base_port}")
    return PortPlan(base_port, base_port + 1,
                    {n: (base_port + 10 + i, base_port + 30 + i) for i, n in enumerate(services)})


def _check_free(plan: PortPlan) -> None:
    ports = [plan.broker, plan.s3] + [p for pair in plan.services.values() for p in pair]
    busy = [p for p in ports if p and local_servers.port_open(local_servers.LOOPBACK, p)]
    if busy:
        raise FailedPrecondition(f"ports already in use: {busy}; pass --base-port N "
                                 "(or --base-port 0 for free ports)")


# What `--insecure` removes from the environment the services inherit.
SECURITY_VARS = ("K4D_TLS_CERT", "K4D_TLS_KEY", "K4D_TLS_CLIENT_CA", "K4D_TLS_CA",
                 "K4D_AUTH_TOKENS", "K4D_TOKEN")
INSECURE_WARNING = ("k4d up: INSECURE (--insecure): no TLS and no tokens; anyone who can reach "
                    "these loopback ports may call every RPC")


def _service_env(name: str, grpc_port: int, metrics_port: int, broker, s3,
                 credentials=None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECURITY_VARS}
    if credentials is not None:
        env.update(credentials.server_env())
    env.update({
        "K4D_GRPC_HOST": local_servers.LOOPBACK, "K4D_GRPC_PORT": str(grpc_port),
        "K4D_METRICS_PORT": str(metrics_port), "K4D_KAFKA_BOOTSTRAP": broker.address,
        "K4D_STORE_URI": f"s3://{LOCAL_BUCKET}", "K4D_S3_ENDPOINT": s3.address,
        "K4D_S3_ACCESS_KEY": s3.info["access_key"], "K4D_S3_SECRET_KEY": s3.info["secret_key"],
        "K4D_S3_REGION": s3.info["region"], "K4D_S3_SECURE": "0", "OTEL_SERVICE_NAME": name,
    })
    env.setdefault("K4D_KAFKA_SESSION_TIMEOUT_MS", str(LOCAL_SESSION_TIMEOUT_MS))  # yours wins
    return env


def _prepare_broker_and_bucket(broker, s3) -> None:
    """Create every topic (+ DLQs) and the bucket, so services start against a ready cluster."""
    from k4d.bus import ALL_TOPICS, dlq
    from k4d.bus.kafka import KafkaBus

    with KafkaBus(broker.address, client_id="k4d-up") as bus:
        bus.ensure_topics([*ALL_TOPICS, *(dlq(t) for t in ALL_TOPICS)])
    _bucket_store(s3).close()


def _bucket_store(s3):
    """The local S3 server's bucket as a Store (creating the bucket if need be)."""
    from k4d.store.s3 import S3Store

    return S3Store(s3.address, LOCAL_BUCKET, access_key=s3.info["access_key"],
                   secret_key=s3.info["secret_key"], region=s3.info["region"])


def _default_model(s3) -> tuple[str, str]:
    """Publish the model `k4d simulate` runs without --model into this cluster's registry,
    so that `k4d submit` without --model runs the same one: returns (the reference the
    simulator fills into specs without a model, what happened) or ("", why not). The
    package that owns that choice does it (the `default_model` hook of UP_HOOKS)."""
    from k4d.service import installed

    hook = installed(UP_HOOKS).get("default_model")
    if hook is None:
        return "", "no default-model hook installed (k4d-embedded)"
    try:
        publish = hook.load()
    except ImportError as exc:  # a runtime-only install runs no generator either
        return "", f"default model unavailable: {exc}"
    store = _bucket_store(s3)
    try:
        return publish(store)
    finally:
        store.close()


def _print_table(rows: list[tuple[str, str, str, str]]) -> None:
    header = ("NAME", "KIND", "ADDRESS", "STATUS")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    sys.stdout.flush()


def _security(options: UpOptions, state_dir: Path):
    """(credentials, the ClientSecurity `k4d up` checks health with); (None, None) with
    --insecure, after saying so."""
    from k4d.grpc_client import ClientSecurity

    if options.insecure:
        print(INSECURE_WARNING, file=sys.stderr, flush=True)
        return None, None
    from k4d.local_credentials import ensure_local_credentials

    credentials = ensure_local_credentials(state_dir)
    return credentials, ClientSecurity(tls_ca=str(credentials.ca))


def _client_lines(broker, s3, credentials) -> list[str]:
    exported = ("K4D_KAFKA_BOOTSTRAP", "K4D_KAFKA_SESSION_TIMEOUT_MS", "K4D_STORE_URI",
                "K4D_S3_ENDPOINT", "K4D_S3_ACCESS_KEY", "K4D_S3_SECRET_KEY", "K4D_S3_REGION")
    env = {k: v for k, v in _service_env("client", 0, 0, broker, s3).items() if k in exported}
    if credentials is None:
        return ["clients: export " + " ".join(f"{k}={v}" for k, v in env.items())]
    env.update(credentials.client_env())
    return ["clients: export " + " ".join(f"{k}={v}" for k, v in env.items()),
            f"operator token: {credentials.tokens['operator']}"]


def up(options: UpOptions) -> int:
    from k4d.grpc_client import wait_healthy
    from k4d.service import installed

    if not options.timeout_s > 0 or math.isinf(options.timeout_s):  # also rejects nan
        raise InvalidArgument.for_field("--timeout", f"expected seconds > 0, got {options.timeout_s}")
    available = installed("k4d.services")
    names = sorted(available) if options.services is None else options.services
    unknown = [n for n in names if n not in available]
    if unknown:
        raise InvalidArgument.for_field(
            "--services", f"unknown {unknown}; installed: {', '.join(sorted(available)) or 'none'}")
    with_worker = installed("k4d.workers") if options.workers else {}
    plan = plan_ports(options.base_port, names)
    _check_free(plan)
    log_dir = Path(options.log_dir or tempfile.mkdtemp(prefix="k4d-up-"))
    print(f"k4d up: logs, certificates and tokens in {log_dir}", flush=True)
    credentials, security = _security(options, log_dir)

    processes: list[local_servers.ManagedProcess] = []
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        broker = local_servers.start_broker(plan.broker, log_dir=log_dir)
        processes.append(broker)
        s3 = local_servers.start_s3_server(plan.s3, log_dir=log_dir)
        processes.append(s3)
        _prepare_broker_and_bucket(broker, s3)
        rows = [("broker", "kafka", broker.address, "healthy"),
                ("s3", "s3", f"http://{s3.address}", "healthy")]
        default_model = ""
        if "simulator" in names and not current_settings().simulator.default_model:
            default_model, how = _default_model(s3)
            rows.append(("model", "registry", default_model or STATIC_WORLD, how))

        services = []
        for name in names:
            grpc_port, metrics_port = plan.services[name]
            argv = [sys.executable, "-m", "k4d.cli.serve", name]
            if name in with_worker:
                argv.append("--worker")
            env = _service_env(name, grpc_port, metrics_port, broker, s3, credentials)
            if name == "simulator" and default_model:
                env[SIMULATOR_DEFAULT_MODEL_ENV] = default_model
            services.append(local_servers.spawn(name, argv, f"{local_servers.LOOPBACK}:{grpc_port}",
                                                log_dir, env=env, metrics_port=metrics_port))
        processes.extend(services)
        all_healthy = True
        for service in services:
            healthy = wait_healthy(service.address, "", options.timeout_s,
                                   should_abort=lambda s=service: not s.alive() or stop.is_set(),
                                   security=security)
            all_healthy &= healthy
            metrics = service.info["metrics_port"]
            status = "healthy" if healthy else ("exited" if not service.alive() else "unhealthy")
            rows.append((service.name, "grpc", service.address
                         + (f"  metrics :{metrics}" if metrics else ""), status))
            if not healthy:
                print(f"--- {service.name} log ({service.log_path}) ---\n{service.log_tail()}",
                      file=sys.stderr)
        _print_table(rows)
        print("\n".join(_client_lines(broker, s3, credentials)), flush=True)
        if options.check:
            return 0 if all_healthy else 1
        print("k4d up: running; Ctrl-C to stop", flush=True)
        while not stop.wait(0.5):
            for process in processes:
                if not process.alive() and not process.info.get("reported"):
                    process.info["reported"] = True
                    print(f"k4d up: {process.name} exited with code {process.popen.returncode} "
                          f"(log: {process.log_path})", file=sys.stderr, flush=True)
        return 0
    finally:
        print("k4d up: stopping", flush=True)
        local_servers.stop_all(processes, CHILD_GRACE_S)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
