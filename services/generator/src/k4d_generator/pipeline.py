"""`Kinema4DPipeline` behind a serving backend: the sampling pipeline core
(`k4d_model.pipeline`) with model loading and the torch / ONNX Runtime / TensorRT
denoiser backends of this service."""

from __future__ import annotations

from pathlib import Path

from k4d_model import pipeline as _core
from k4d_model.checkpoints import ModelComponents, load_model
from k4d_model.pipeline import model_id_of

from k4d_generator.backends import create_backend


class Kinema4DPipeline(_core.Kinema4DPipeline):
    """The pipeline with constructors that load a model and put it behind a backend."""

    @classmethod
    def from_pretrained(cls, ref: str | Path, backend: str = "torch", precision: str | None = None,
                        device: str = "cpu", cache_dir: str | Path | None = None,
                        base_dir: str | Path | None = None, store=None,
                        num_frames: int | None = None, height: int | None = None,
                        width: int | None = None, threads: int | None = None
                        ) -> Kinema4DPipeline:
        """Load a model (our layout, official layout, or `registry:name/version` with `store`)
        and put it behind a backend (`torch`, `onnx`, `tensorrt`)."""
        from k4d_model.registry import is_registry_ref, resolve_registry_ref

        from k4d_generator.backends.factory import check_backend_precision

        check_backend_precision(backend, precision)  # before minutes of loading weights
        if is_registry_ref(str(ref)):
            ref = resolve_registry_ref(str(ref), store, cache_dir)
        components = load_model(ref, base_dir=base_dir, num_frames=num_frames, height=height,
                                width=width)
        return cls.from_components(components, backend=backend, precision=precision,
                                   device=device, cache_dir=cache_dir, threads=threads)

    @classmethod
    def from_components(cls, components: ModelComponents, backend: str = "torch",
                        precision: str | None = None, device: str = "cpu",
                        cache_dir: str | Path | None = None, threads: int | None = None
                        ) -> Kinema4DPipeline:
        model_id = model_id_of(components)
        denoiser = create_backend(backend, components.transformer, precision=precision,
                                  device=device, cache_dir=cache_dir, model_id=model_id,
                                  threads=threads)
        vae_device = device if backend != "tensorrt" else "cuda"
        return cls(components, denoiser, device=vae_device, model_id=model_id)
