"""`ModelManager`: the loaded model of a generator process, shared by the gRPC servicer and
the Kafka stage (no gRPC or Kafka in here).

- `load(ref, backend, precision)` builds a pipeline and swaps it in atomically; requests
  already sampling finish on the model they started with.
- `generate(...)` samples with the loaded model, or with the static-world generator when
  asked for it (or when no model is loaded and static-world fallback is allowed).
  Sampling is serialised: one request at a time per process and device.
- `on_model_published(name, version)` hot-reloads when the loaded model's name gets a new
  version.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from k4d.errors import FailedPrecondition, InvalidArgument, NotFound
from k4d.tensor_io import sha256_bytes

from k4d_generator.results import GenerationResult

STATIC_WORLD = "static-world"


@dataclass
class LoadedModel:
    ref: str
    backend: str
    precision: str
    pipeline: object  # Kinema4DPipeline
    load_seconds: float
    info: dict = field(default_factory=dict)

    def matches(self, name: str = "", version: str = "", uri: str = "") -> bool:
        """Whether a ModelRef names this model: the same reference, or the same name with
        the version unset or equal to the loaded one."""
        return self.ref == model_ref_string(name, version, uri) or (
            self.info.get("name") == name and version in ("", self.info.get("version")))


def model_ref_string(name: str = "", version: str = "", uri: str = "") -> str:
    """A `ModelRef` (name/version or uri) as the reference `from_pretrained` takes."""
    if uri:
        return uri[len("file://"):] if uri.startswith("file://") else uri
    if not name:
        raise InvalidArgument.for_field("model", "set name (+ version) or uri")
    return f"registry:{name}/{version}" if version else f"registry:{name}"


class ModelManager:
    def __init__(self, store=None, cache_dir: str | Path | None = None, device: str = "cpu",
                 allow_static_world: bool = True, on_loaded=None):
        self.store = store
        self.cache_dir = cache_dir
        self.device = device
        self.allow_static_world = allow_static_world
        self.on_loaded = on_loaded  # callback(LoadedModel), e.g. readiness -> SERVING
        self._loaded: LoadedModel | None = None
        self._swap_lock = threading.Lock()
        self._sample_lock = threading.Lock()

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(self, ref: str, backend: str = "torch", precision: str | None = None
             ) -> LoadedModel:
        from k4d_generator.pipeline import Kinema4DPipeline

        started = time.perf_counter()
        pipeline = Kinema4DPipeline.from_pretrained(ref, backend=backend, precision=precision,
                                                    device=self.device, cache_dir=self.cache_dir,
                                                    store=self.store)
        loaded = LoadedModel(ref, backend, precision or pipeline.backend.describe().get(
            "precision", "fp32"), pipeline, time.perf_counter() - started,
            pipeline.info.to_dict())
        with self._swap_lock:
            self._loaded = loaded
        if self.on_loaded is not None:
            self.on_loaded(loaded)
        return loaded

    def on_model_published(self, name: str, version: str) -> LoadedModel | None:
        """Hot reload: a new version of the loaded model's name replaces it (same backend)."""
        current = self._loaded
        if current is None or current.info.get("name") != name \
                or current.info.get("version") == version:
            return None
        return self.load(f"registry:{name}/{version}", current.backend, current.precision)

    def generate(self, image: np.ndarray, robot_rgb: np.ndarray, robot_pointmap: np.ndarray,
                 robot_mask: np.ndarray, *, backend: str = "", num_steps: int | None = None,
                 seed: int = 42, guidance: float | None = None, scheduler: str | None = None,
                 shift: float | None = None, callback=None, should_cancel=None
                 ) -> GenerationResult:
        robot = {"robot_rgb": robot_rgb, "robot_pointmap": robot_pointmap,
                 "robot_mask": robot_mask}
        current = self._loaded
        if backend == STATIC_WORLD or (current is None and self.allow_static_world):
            from k4d_generator.static_world import StaticWorldGenerator

            return StaticWorldGenerator()(image, seed=seed, **robot)
        if current is None:
            raise FailedPrecondition("no model is loaded; call LoadModel first")
        if backend and backend != current.backend:
            raise FailedPrecondition(f"the loaded model runs on {current.backend!r}; load it "
                                     f"with backend {backend!r} first")
        with self._sample_lock:
            return current.pipeline(image, num_steps=num_steps, seed=seed, guidance=guidance,
                                    scheduler=scheduler, shift=shift, callback=callback,
                                    should_cancel=should_cancel, **robot)

    def describe(self, name: str = "", version: str = "", uri: str = "") -> dict:
        """Info of a model: the loaded one when it matches, else from the registry / disk."""
        current = self._loaded
        ref = model_ref_string(name, version, uri)
        if current is not None and current.matches(name, version, uri):
            return {**current.info, "loaded": True, "backend": current.backend,
                    "precision": current.precision, "config": self.loaded_config()}
        from k4d_generator import registry
        from k4d_generator.checkpoints import K4D_MODEL_FILE

        if uri:
            meta_path = Path(ref) / K4D_MODEL_FILE
            if not meta_path.exists():
                raise NotFound(f"model {uri} not found")
            try:
                meta = json.loads(meta_path.read_text())
            except ValueError:
                raise InvalidArgument.for_field("model.uri", f"{meta_path} is not valid "
                                                             "JSON") from None
            return {**meta, "loaded": False, "source": ref}
        if self.store is None:
            raise NotFound("no object store configured for the model registry")
        versions = registry.list_models(self.store).get(name)
        if not versions or (version and version not in versions):
            raise NotFound(f"model {name} {version or ''} not found in the registry".strip())
        version = version or versions[-1]
        prefix = f"{registry.PREFIX}/{name}/{version}"
        meta = json.loads(self.store.get_bytes(f"{prefix}/{K4D_MODEL_FILE}"))
        manifest = self.store.get_bytes(f"{prefix}/{registry.MANIFEST}")
        return {**meta, "name": name, "version": version, "loaded": False,
                "uri": self.store.uri_for(prefix),
                "manifest_sha256": sha256_bytes(manifest)}

    def loaded_config(self) -> dict:
        current = self._loaded
        if current is None:
            return {}
        config = current.pipeline.components.transformer.config
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()
                if not k.startswith("_")}
