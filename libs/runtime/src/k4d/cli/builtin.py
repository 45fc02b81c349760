"""The runtime's own subcommands: `k4d serve <service>` and `k4d up`."""

from __future__ import annotations

import argparse

from k4d.config import parse_port
from k4d.errors import InvalidArgument


def register(subparsers) -> None:
    register_serve(subparsers)
    register_up(subparsers)


def register_serve(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="run one service's gRPC server (and optionally its stage worker)",
        description="Run an installed service (entry point group k4d.services) until SIGTERM. "
                    "Settings come from K4D_* env vars (docs/configuration.md); flags override them.")
    p.add_argument("service", help="service name, e.g. kinematics")
    p.add_argument("--port", type=port, help="gRPC port (default: the service's port, 0 = any free port)")
    p.add_argument("--host", help="bind address of the gRPC and /metrics servers (default "
                                     "127.0.0.1; 0.0.0.0 = every interface)")
    p.add_argument("--metrics-port", type=port, help="Prometheus /metrics port (0 = disabled)")
    p.add_argument("--worker", action="store_true",
                   help="also run the service's Kafka stage worker (entry point group k4d.workers)")
    p.set_defaults(handler=run_serve)


def port(text: str) -> int:
    """argparse type: a TCP port, 0 = any free one (gRPC would wrap larger values)."""
    try:
        return parse_port("port", text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(exc.violations[0].description) from None


def register_up(subparsers) -> None:
    p = subparsers.add_parser(
        "up", help="start broker, S3 server and every installed service on loopback",
        description="Local cluster without Docker/Kubernetes: a Kafka-protocol broker (tansu), "
                    "an S3 server (moto) and every installed service as subprocesses. "
                    "Waits until all are healthy, prints their addresses, stops them on Ctrl-C.")
    p.add_argument("--check", action="store_true",
                   help="start, check health, print the table, stop; exit 0 only if all were healthy")
    p.add_argument("--base-port", type=int, default=None,
                   help="broker=N, S3=N+1, services N+10.., metrics N+30..; 0 = free ports "
                        "(default: the standard ports of docs/configuration.md)")
    p.add_argument("--services", help="comma-separated subset of services to start (default: all)")
    p.add_argument("--no-workers", action="store_true", help="start services without their stage workers")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for health (default 90)")
    p.add_argument("--state-dir", "--log-dir", dest="log_dir",
                   help="state directory: each process's log, the local CA, certificates and "
                        "tokens (default: a new temp dir; reused when it has them)")
    p.add_argument("--insecure", action="store_true",
                   help="no TLS and no tokens (says so on every start)")
    p.set_defaults(handler=run_up)


def run_serve(args: argparse.Namespace) -> int:
    """One service object per process (k4d.service): the gRPC servicer and the stage worker
    both take what they share (e.g. the generator's loaded model) from it."""
    from k4d.config import load_config
    from k4d.grpc_server import serve
    from k4d.service import load_service

    config = load_config(service=args.service, grpc_port=args.port, grpc_host=args.host,
                         metrics_port=args.metrics_port)
    service = load_service(args.service, config, with_worker=args.worker)
    workers, closers = [], [service.close]
    try:
        if args.worker:
            from k4d.bus import open_bus
            from k4d.store import open_store

            bus, store = open_bus(config), open_store(config=config)
            closers += [bus.close, store.close]
            worker = service.build_worker(bus, store)
            if worker is None:
                raise InvalidArgument.for_field(
                    "--worker", f"service {args.service!r} has no stage worker")
            workers.append(worker)
        return serve(config, [lambda server, _config: service.register(server)], workers)
    finally:
        for close in reversed(closers):
            close()


def run_up(args: argparse.Namespace) -> int:
    from k4d.cli.up import UpOptions, up

    names = [n.strip() for n in args.services.split(",")] if args.services else None
    return up(UpOptions(check=args.check, base_port=args.base_port, services=names,
                        workers=not args.no_workers, timeout_s=args.timeout, log_dir=args.log_dir,
                        insecure=args.insecure))
