"""`k4d serve generator [--worker]`: `GeneratorService` (entry point group k4d.services), one
object per process, so the gRPC servicer and the Kafka stage share ONE `ModelManager`.

Readiness is "the model is loaded and warmed up": the service reports NOT_SERVING until
the start-up model below (or a LoadModel) has loaded and sampled one warm-up step. The
stage worker starts consuming only after the start-up load finished, and stops the process
(so its supervisor restarts it) when that load failed. Generator settings (k4d.settings
GeneratorSettings, `current().generator`), read once here:
  K4D_GENERATOR_MODEL      model to load at start (path or registry:NAME[/VERSION]); empty =
                           none (then a job's model is loaded when a job names it). With a
                           model set, the process serves that model (and its newer
                           published versions) only: a job naming another one fails.
  K4D_GENERATOR_BACKEND    torch (default) | onnx | tensorrt
  K4D_GENERATOR_PRECISION  backend precision (default: the backend's)
  K4D_GENERATOR_DEVICE     cpu (default) | cuda[:N]
  K4D_GENERATOR_CACHE_DIR  exported graphs, engines and registry downloads
"""

from __future__ import annotations

import threading

from k4d.grpc_server import set_serving
from k4d.logs import get_logger
from k4d.service import Service
from k4d.settings import GeneratorSettings
from k4d.settings import current as current_settings
from k4d.store import open_store
from kinema4d.v1 import generator_pb2, generator_pb2_grpc

from k4d_generator.api import GeneratorServicer
from k4d_generator.service import ModelManager
from k4d_generator.worker import build_worker

SERVICE_NAME = generator_pb2.DESCRIPTOR.services_by_name["GeneratorService"].full_name
log = get_logger(__name__)


class StartupLoad:
    """The start-up model, loaded in the background (a 14B model takes minutes; the gRPC
    server answers liveness meanwhile). `wait` blocks until it is loaded."""

    def __init__(self, manager: ModelManager, settings: GeneratorSettings):
        self.manager, self.settings = manager, settings
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._started = False

    @property
    def model(self) -> str:
        return self.settings.model

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if not self.model:
            self.done.set()
            return
        threading.Thread(target=self._load, name="generator-load", daemon=True).start()

    def _load(self) -> None:
        try:
            self.manager.load(self.model, self.settings.backend,
                              self.settings.precision or None)
        except BaseException as exc:
            self.error = exc
            log.exception("start-up model load failed", extra={"model": self.model[:200]})
        finally:
            self.done.set()

    def wait(self, stop_event: threading.Event) -> bool:
        """True once the start-up model is loaded (or none is configured), False if
        `stop_event` came first; raises RuntimeError if the load failed."""
        self.start()
        while not self.done.wait(0.5):
            if stop_event.is_set():
                return False
        if self.error is not None:
            raise RuntimeError(f"the start-up model {self.model[:200]} failed to load: "
                               f"{type(self.error).__name__}: {self.error}")
        return True


class GeneratorService(Service):
    """One per process: the model manager, the start-up load, the servicer and the worker.
    `store`, `env` and `manager` are injectable for tests (defaults: K4D_STORE_URI,
    os.environ, a new ModelManager)."""

    def __init__(self, config, *, store=None, env=None, manager: ModelManager | None = None):
        super().__init__(config)
        self.settings = current_settings(env).generator
        self._owns_store = store is None
        self.store = store or open_store(config=config)
        self.manager = manager or ModelManager(
            self.store, cache_dir=self.settings.cache_dir or None,
            device=self.settings.device, allow_static_world=False,
            default_sampling={"profile": self.settings.profile} if self.settings.profile
            else None)
        self.startup = StartupLoad(self.manager, self.settings)

    def register(self, server) -> list[str]:
        self.manager.on_loaded = lambda _loaded: set_serving(server, SERVICE_NAME, True)
        servicer = GeneratorServicer(self.manager, self.store,
                                     inline_limit_bytes=self.config.inline_limit_bytes)
        generator_pb2_grpc.add_GeneratorServiceServicer_to_server(servicer, server)
        set_serving(server, SERVICE_NAME, False)
        self.startup.start()
        return [SERVICE_NAME]

    def build_worker(self, bus, store):
        return build_worker(self.config, bus, store, manager=self.manager,
                            startup=self.startup)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()


def register_service(server, config, store=None, env=None,
                     manager: ModelManager | None = None) -> list[str]:
    """A GeneratorService's gRPC side alone (tests and in-process servers)."""
    return GeneratorService(config, store=store, env=env, manager=manager).register(server)
