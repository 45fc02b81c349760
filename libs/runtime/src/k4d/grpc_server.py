"""gRPC bootstrap: `create_server` (testable: port 0 works, returns the bound port) and
`serve` (the process: metrics, tracing, workers, SIGTERM handling).

Security (docs/operations.md): TLS when `config.tls_cert` is set (mutual with
`tls_client_ca`), bearer tokens and the roles table when `config.auth_tokens` is set
(`k4d.auth`); health checks stay open either way.

Health: the overall service "" is SERVING once the server runs (liveness); each
registered service is SERVING unless its register function set it otherwise through
`set_serving` (readiness, e.g. the generator before its model is loaded).
"""

from __future__ import annotations

import signal
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from k4d.auth import server_interceptors
from k4d.config import Config
from k4d.errors import Unavailable
from k4d.grpc_interceptors import ErrorMappingInterceptor, MetricsInterceptor, TracingInterceptor
from k4d.grpc_requests import RequestCheckInterceptor
from k4d.logs import configure_logging, get_logger
from k4d.telemetry import setup_tracing, start_metrics_server
from k4d.tls import server_credentials

log = get_logger(__name__)

RegisterFn = Callable[[grpc.Server, Config], Sequence[str]]
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class _Health:
    """The health servicer of one server plus the names services set themselves."""

    def __init__(self):
        self.servicer = health.HealthServicer(experimental_non_blocking=True)
        self.explicit: set[str] = set()
        self.shutdown_callbacks: list[Callable[[], None]] = []


_HEALTH: weakref.WeakKeyDictionary[grpc.Server, _Health] = weakref.WeakKeyDictionary()


def set_serving(server: grpc.Server, service_name: str, serving: bool) -> None:
    """Report `service_name` SERVING / NOT_SERVING on `server`'s health service."""
    state = _HEALTH[server]
    state.explicit.add(service_name)
    state.servicer.set(service_name, _SERVING if serving else _NOT_SERVING)


def enter_shutdown(server: grpc.Server) -> None:
    """Every service NOT_SERVING from now on (load balancers stop sending new calls)."""
    _HEALTH[server].servicer.enter_graceful_shutdown()


def add_shutdown_callback(server: grpc.Server, callback: Callable[[], None]) -> None:
    """Have `serve` call `callback` on shutdown (after NOT_SERVING and the workers, before
    the server stops): services stop their own background loops (bus feeds, caches) here."""
    _HEALTH[server].shutdown_callbacks.append(callback)


def run_shutdown_callbacks(server: grpc.Server) -> None:
    for callback in reversed(_HEALTH[server].shutdown_callbacks):
        try:
            callback()
        except Exception:
            log.exception("shutdown callback failed")


def server_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes)]


def create_server(config: Config, register_fns: Iterable[RegisterFn], *,
                  interceptors: Sequence[grpc.ServerInterceptor] = ()) -> tuple[grpc.Server, int]:
    """Build (not start) a server with health, reflection and the interceptors, call every
    register function, bind config.grpc_host:config.grpc_port (0 = any free port), with
    TLS and token checks as the config says. Returns (server, bound_port)."""
    credentials = server_credentials(config)  # bad TLS files fail here, before binding
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.grpc_max_workers, thread_name_prefix="grpc"),
        # Auth after tracing and metrics (refusals are counted and traced), before the rest.
        interceptors=[TracingInterceptor(), MetricsInterceptor(), *server_interceptors(config),
                      ErrorMappingInterceptor(), RequestCheckInterceptor(), *interceptors],
        # No SO_REUSEPORT: a second server on a busy port must fail, not share it silently.
        options=[*server_options(config.grpc_max_message_bytes), ("grpc.so_reuseport", 0)])
    state = _Health()
    _HEALTH[server] = state
    health_pb2_grpc.add_HealthServicer_to_server(state.servicer, server)

    names: list[str] = []
    for register in register_fns:
        names.extend(register(server, config))
    for name in names:
        if name not in state.explicit:
            state.servicer.set(name, _SERVING)
    state.servicer.set("", _SERVING)
    reflection.enable_server_reflection(
        [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server)

    address = f"{config.grpc_host}:{config.grpc_port}"
    try:
        port = server.add_insecure_port(address) if credentials is None else \
            server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise Unavailable(f"cannot bind gRPC server to {address}: {exc}") from None
    if port == 0:
        raise Unavailable(f"cannot bind gRPC server to {address}")
    return server, port


def _run_worker(worker, stop: threading.Event, failed: threading.Event) -> None:
    try:
        worker.run(stop)
    except Exception:
        # A dead worker in a live server would silently stop the pipeline: stop the
        # whole process so the supervisor restarts it.
        log.exception("stage worker crashed; shutting down")
        failed.set()
        stop.set()


def serve(config: Config, register_fns: Iterable[RegisterFn], workers: Iterable = (), *,
          stop_event: threading.Event | None = None, install_signal_handlers: bool = True) -> int:
    """Run until SIGTERM/SIGINT (or `stop_event`): health NOT_SERVING -> workers finish
    their message and commit -> server.stop(grace). Returns the process exit code."""
    configure_logging(config.log_level, config.service_name)
    setup_tracing(config)
    server, port = create_server(config, register_fns)
    metrics_server = start_metrics_server(config.metrics_port, config.grpc_host)
    server.start()
    log.info("gRPC server listening", extra={
        "host": config.grpc_host, "port": port, "metrics_port": config.metrics_port,
        "tls": "mutual" if config.tls_client_ca else "on" if config.tls_cert else "off",
        "auth": "tokens" if config.auth_tokens else "off"})

    stop, failed = stop_event or threading.Event(), threading.Event()
    if install_signal_handlers:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    threads = [threading.Thread(target=_run_worker, args=(w, stop, failed),
                                name=f"worker-{i}", daemon=True) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    while not stop.wait(0.5):
        pass

    log.info("shutting down", extra={"grace_s": config.shutdown_grace_s})
    enter_shutdown(server)
    for thread in threads:
        thread.join(config.shutdown_grace_s)
    run_shutdown_callbacks(server)
    server.stop(config.shutdown_grace_s).wait()
    if metrics_server is not None:
        metrics_server.shutdown()
    return 1 if failed.is_set() else 0
