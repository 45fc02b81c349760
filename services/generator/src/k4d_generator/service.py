"""`ModelManager`: the ONE loaded model of a generator process, shared by the gRPC servicer
and the Kafka stage (`server.GeneratorService` builds it once; no gRPC or Kafka in here).

- `load(ref, backend, precision)` builds a pipeline, warms it up (one sampling step at the
  model's clip size: exports, engine builds and first-call allocations happen here, not
  in the first request) and swaps it in atomically; requests already sampling finish on
  the model they started with. Every load counts in `k4d_generator_model_loads`.
- `generate(...)` samples with the loaded model, or with the static-world generator when
  asked for it (or when no model is loaded and static-world fallback is allowed).
  Sampling is serialised: one request at a time per process and device; the wait for
  the sampling lock is the request's queue time (`k4d.metrics.waiting`).
- `on_model_published(name, version)` switches to a newer published version of the
  served registry model (between jobs: a job takes the model once it holds the lock).
- `describe` / `list_models`: model info from the loaded model or the registry, with a
  number of store reads linear in the number of versions.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from k4d.errors import FailedPrecondition, InvalidArgument, NotFound
from k4d.logs import get_logger
from k4d.metrics import waiting
from k4d.model_names import STATIC_WORLD
from k4d.sampling import check_sampling
from k4d.tensor_io import sha256_bytes
from k4d_model.results import GenerationResult

from k4d_generator.metrics import generator_metrics

log = get_logger(__name__)


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
                 allow_static_world: bool = True, on_loaded=None, warm_up: bool = True,
                 default_sampling: dict | None = None):
        self.store = store
        self.cache_dir = cache_dir
        self.device = device
        self.allow_static_world = allow_static_world
        self.on_loaded = on_loaded  # callback(LoadedModel), e.g. readiness -> SERVING
        self.warm_up = warm_up
        # the deployment's sampling layer (K4D_GENERATOR_PROFILE): under each request's
        self.default_sampling = check_sampling(dict(default_sampling or {}),
                                               "K4D_GENERATOR_PROFILE")
        self._loaded: LoadedModel | None = None
        self._swap_lock = threading.Lock()
        self._sample_lock = threading.Lock()
        self._metrics = generator_metrics()

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(self, ref: str, backend: str = "torch", precision: str | None = None
             ) -> LoadedModel:
        from k4d_generator.pipeline import Kinema4DPipeline

        started = time.perf_counter()
        try:
            pipeline = Kinema4DPipeline.from_pretrained(
                ref, backend=backend, precision=precision, device=self.device,
                cache_dir=self.cache_dir, store=self.store)
            if self.warm_up:
                warm_up(pipeline, self.default_sampling)
        except BaseException:
            self._metrics.model_loads.labels(backend, "error").inc()
            raise
        seconds = time.perf_counter() - started
        self._metrics.model_loads.labels(backend, "ok").inc()
        self._metrics.model_load_seconds.labels(backend).observe(seconds)
        loaded = LoadedModel(ref, backend, precision or pipeline.backend.describe().get(
            "precision", "fp32"), pipeline, seconds, pipeline.info.to_dict())
        with self._swap_lock:
            self._loaded = loaded
        log.info("model loaded", extra={"model": ref, "backend": backend,
                                        "version": loaded.info.get("version", ""),
                                        "load_s": round(seconds, 3)})
        if self.on_loaded is not None:
            self.on_loaded(loaded)
        return loaded

    def on_model_published(self, name: str, version: str) -> LoadedModel | None:
        """Hot reload: a version of the served registry model published after the loaded
        one replaces it (same backend and precision). Announcements of older versions
        (a listener replaying the topic) change nothing."""
        from k4d_model import registry

        current = self._loaded
        if current is None or not registry.is_registry_ref(current.ref) \
                or current.info.get("name") != name or current.info.get("version") == version:
            return None
        announced = registry.read_manifest(self.store, name, version)["created_unix"]
        try:
            served = registry.read_manifest(self.store, name,
                                            current.info.get("version", ""))["created_unix"]
        except NotFound:  # the served version was removed from the registry: any is newer
            served = float("-inf")
        if announced <= served:
            return None
        return self.load(f"registry:{name}/{version}", current.backend, current.precision)

    def generate(self, image: np.ndarray, robot_rgb: np.ndarray, robot_pointmap: np.ndarray,
                 robot_mask: np.ndarray, *, backend: str = "", num_steps: int | None = None,
                 seed: int = 42, guidance: float | None = None, scheduler: str | None = None,
                 shift: float | None = None, callback=None, should_cancel=None,
                 initial_pointmap: np.ndarray | None = None,
                 T_cam_from_base: np.ndarray | None = None, tool=None,
                 options: dict | None = None) -> GenerationResult:
        """options: the request's sampling options (k4d.sampling), over this process's
        `default_sampling` (K4D_GENERATOR_PROFILE) over the model's;
        initial_pointmap: optional (H, W, 3) metres, the first frame's points (RGB-D);
        T_cam_from_base: optional (4, 4), the camera's pose relative to the robot's base;
        tool: optional k4d.tool.ToolTrack of the rollout (read by a model with a tool condition)."""
        robot = {"robot_rgb": robot_rgb, "robot_pointmap": robot_pointmap,
                 "robot_mask": robot_mask}
        if backend == STATIC_WORLD or (self._loaded is None and self.allow_static_world):
            from k4d_generator.static_world import StaticWorldGenerator

            return StaticWorldGenerator()(image, seed=seed, initial_pointmap=initial_pointmap,
                                          **robot)
        with waiting():  # queue time: another request or job is sampling
            self._sample_lock.acquire()
        try:
            # Taken once the lock is held: a model swapped in while this request waited
            # is the one it runs on; one swapped in while it samples waits for the next.
            current = self._loaded
            if current is None:
                raise FailedPrecondition("no model is loaded; call LoadModel first")
            if backend and backend != current.backend:
                raise FailedPrecondition(f"the loaded model runs on {current.backend!r}; load "
                                         f"it with backend {backend!r} first")
            return current.pipeline(image, num_steps=num_steps, seed=seed, guidance=guidance,
                                    scheduler=scheduler, shift=shift, callback=callback,
                                    should_cancel=should_cancel,
                                    initial_pointmap=initial_pointmap,
                                    T_cam_from_base=T_cam_from_base, tool=tool,
                                    options=[self.default_sampling, options or {}], **robot)
        finally:
            self._sample_lock.release()

    def describe(self, name: str = "", version: str = "", uri: str = "") -> dict:
        """Info of a model: the loaded one when it matches, else from the registry / disk."""
        current = self._loaded
        ref = model_ref_string(name, version, uri)
        if current is not None and current.matches(name, version, uri):
            return self._loaded_info(current)
        from k4d_model import registry
        from k4d_model.checkpoints import K4D_MODEL_FILE

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
        if not version:
            versions = registry.list_models(self.store).get(name)
            if not versions:
                raise NotFound(f"model {name} not found in the registry")
            version = versions[-1]
        return self._registry_info(name, version,
                                   registry.read_manifest_bytes(self.store, name, version))

    def list_models(self) -> list[dict]:
        """Every published version (oldest first per name; the loaded one marked loaded),
        then the loaded model when it is not in the registry. Store reads: one listing,
        then two objects per version."""
        from k4d_model import registry

        current = self._loaded
        models, seen = [], set()
        if self.store is not None:
            for name, versions in registry.list_versions(self.store).items():
                for version, manifest_bytes in versions:
                    seen.add((name, version))
                    if current is not None and current.matches(name, version):
                        models.append(self._loaded_info(current))
                    else:
                        models.append(self._registry_info(name, version, manifest_bytes))
        if current is not None and (current.info.get("name"), current.info.get("version")) \
                not in seen:
            models.append(self._loaded_info(current))
        return models

    def _loaded_info(self, current: LoadedModel) -> dict:
        return {**current.info, "loaded": True, "backend": current.backend,
                "precision": current.precision, "config": self.loaded_config()}

    def _registry_info(self, name: str, version: str, manifest_bytes: bytes) -> dict:
        from k4d_model import registry
        from k4d_model.checkpoints import K4D_MODEL_FILE

        prefix = f"{registry.PREFIX}/{name}/{version}"
        meta = json.loads(self.store.get_bytes(f"{prefix}/{K4D_MODEL_FILE}"))
        return {**meta, "name": name, "version": version, "loaded": False,
                "uri": self.store.uri_for(prefix),
                "manifest_sha256": sha256_bytes(manifest_bytes)}

    def loaded_config(self) -> dict:
        current = self._loaded
        if current is None:
            return {}
        config = current.pipeline.components.transformer.config
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()
                if not k.startswith("_")}


def warm_up(pipeline, options: dict | None = None) -> None:
    """One sampling step on a synthetic input at the model's clip size (a box-shaped robot
    1 m in front of the camera), so that a backend's export / engine build / first-call
    allocations (and the deployment's levers, `options`: FP8, compiled blocks) happen before
    the model is reported ready."""
    info = pipeline.info
    t, h, w = info.num_frames, info.height, info.width
    mask = np.zeros((t, h, w), bool)
    mask[:, h // 4: 3 * h // 4, w // 4: 3 * w // 4] = True
    pointmap = np.zeros((t, h, w, 3), np.float32)
    pointmap[mask] = (0.0, 0.0, 1.0)
    rgb = np.zeros((t, h, w, 3), np.uint8)
    rgb[mask] = 128
    started = time.perf_counter()
    pipeline(np.zeros((h, w, 3), np.uint8), rgb, pointmap, mask, num_steps=1, seed=0,
             options=[options or {}, {}])
    log.info("model warmed up", extra={"warm_up_s": round(time.perf_counter() - started, 3)})
