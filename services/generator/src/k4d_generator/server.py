"""`k4d serve generator`: registers GeneratorService (entry point group k4d.services).

Readiness is "a model is loaded": the service reports NOT_SERVING until LoadModel (or the
start-up model below) finishes. Generator settings, read once here at start-up:
  K4D_GENERATOR_MODEL      model to load at start (path or registry:NAME[/VERSION]); empty = none
  K4D_GENERATOR_BACKEND    torch (default) | onnx | tensorrt
  K4D_GENERATOR_PRECISION  backend precision (default: the backend's)
  K4D_GENERATOR_DEVICE     cpu (default) | cuda[:N]
  K4D_GENERATOR_CACHE_DIR  exported graphs, engines and registry downloads
"""

from __future__ import annotations

import os
import threading

from k4d.grpc_server import set_serving
from k4d.store import open_store
from k4d.telemetry import get_logger
from kinema4d.v1 import generator_pb2, generator_pb2_grpc

from k4d_generator.api import GeneratorServicer
from k4d_generator.service import ModelManager

SERVICE_NAME = generator_pb2.DESCRIPTOR.services_by_name["GeneratorService"].full_name
log = get_logger(__name__)


def generator_settings(env=None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {"model": env.get("K4D_GENERATOR_MODEL", ""),
            "backend": env.get("K4D_GENERATOR_BACKEND", "") or "torch",
            "precision": env.get("K4D_GENERATOR_PRECISION", ""),
            "device": env.get("K4D_GENERATOR_DEVICE", "") or "cpu",
            "cache_dir": env.get("K4D_GENERATOR_CACHE_DIR", "")}


def register_service(server, config, store=None, env=None,
                     manager: ModelManager | None = None) -> list[str]:
    """Entry point: add the servicer; returns its full name. `store`, `env` and `manager`
    are injectable for tests (defaults: K4D_STORE_URI, os.environ, a new ModelManager)."""
    settings = generator_settings(env)
    store = store or open_store(config=config)
    manager = manager or ModelManager(store, cache_dir=settings["cache_dir"] or None,
                                      device=settings["device"], allow_static_world=False)
    manager.on_loaded = lambda _loaded: set_serving(server, SERVICE_NAME, True)
    servicer = GeneratorServicer(manager, store, inline_limit_bytes=config.inline_limit_bytes)
    generator_pb2_grpc.add_GeneratorServiceServicer_to_server(servicer, server)
    set_serving(server, SERVICE_NAME, False)
    if settings["model"]:
        # Loading a 14B model takes minutes: do it in the background; readiness follows it.
        def load() -> None:
            try:
                manager.load(settings["model"], settings["backend"],
                             settings["precision"] or None)
            except Exception:
                log.exception("start-up model load failed; LoadModel can retry")

        threading.Thread(target=load, name="generator-load", daemon=True).start()
    return [SERVICE_NAME]
