"""What `k4d serve <name>` runs: ONE service object per process.

A service plug-in names, under the entry point group `k4d.services`, either

- a `Service` subclass (preferred): `k4d serve` builds one instance from the config, and
  both the gRPC side (`register(server)`) and the Kafka stage (`build_worker(bus, store)`)
  take what they share from it: the generator's one loaded model, for example, instead
  of one copy per side; or
- a register function `register_service(server, config) -> [service names]`, with its
  stage worker as a function `build_worker(config, bus, store)` under `k4d.workers`
  (wrapped in a `FunctionService`, so the rest of the runtime only knows `Service`).

A `Service` subclass with a stage worker still lists a `k4d.workers` entry point for
`k4d up` and the image checks (which read the entry points without importing the
service); `k4d serve --worker` takes the worker from the service object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from k4d.errors import InvalidArgument

SERVICES_GROUP = "k4d.services"
WORKERS_GROUP = "k4d.workers"


class Service:
    """One deployable service in one process. Subclasses override `register` and, when the
    service has a Kafka stage, `build_worker`."""

    def __init__(self, config):
        self.config = config

    def register(self, server) -> Sequence[str]:
        """Add the gRPC servicer(s) to `server`; return their full names (health and
        reflection list them). Readiness: `k4d.grpc_server.set_serving`."""
        raise NotImplementedError

    def build_worker(self, bus, store):
        """The stage worker (an object with `run(stop_event)`), or None without one."""
        return None

    def close(self) -> None:
        """Release what the service holds (called once, after the server stopped)."""


class FunctionService(Service):
    """A plug-in given as functions: `register(server, config)` and optionally
    `build_worker(config, bus, store)`."""

    def __init__(self, config, register: Callable, build_worker: Callable | None = None):
        super().__init__(config)
        self._register, self._build_worker = register, build_worker

    def register(self, server) -> Sequence[str]:
        return list(self._register(server, self.config))

    def build_worker(self, bus, store):
        return None if self._build_worker is None else self._build_worker(self.config, bus, store)


def installed(group: str) -> dict:
    """{name: entry point} of an entry point group (nothing is imported)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=group)}


def load_service(name: str, config, *, with_worker: bool = False) -> Service:
    """The installed service `name` as a `Service` built from `config`. InvalidArgument
    (field `service`) when it is not installed, (field `--worker`) when `with_worker` is
    asked of a function plug-in without a `k4d.workers` entry point."""
    services = installed(SERVICES_GROUP)
    if name not in services:
        raise InvalidArgument.for_field(
            "service", f"unknown service {name!r}; installed: {', '.join(sorted(services)) or 'none'}")
    target = services[name].load()
    if isinstance(target, type) and issubclass(target, Service):
        return target(config)
    build_worker = None
    if with_worker:
        workers = installed(WORKERS_GROUP)
        if name not in workers:
            raise InvalidArgument.for_field(
                "--worker", f"service {name!r} has no stage worker; installed: "
                            f"{', '.join(sorted(workers)) or 'none'}")
        build_worker = workers[name].load()
    return FunctionService(config, target, build_worker)
