"""`create_backend(name, ...)`: the one place that maps a backend name to its class."""

from __future__ import annotations

from pathlib import Path

from k4d.errors import InvalidArgument

from k4d_generator import cache_root

BACKENDS = ("torch", "onnx", "tensorrt")


def create_backend(name: str, transformer, *, precision: str | None = None, device: str = "cpu",
                   cache_dir: str | Path | None = None, model_id: str = "model",
                   threads: int | None = None):
    """Build a denoiser backend around a loaded transformer (LoRA already fused).

    precision: torch fp32|bf16|fp16 (default fp32); onnx fp32; tensorrt fp16|fp8|fp32 (default fp16).
    cache_dir: where exported ONNX graphs and TensorRT engines are kept.
    """
    _check_device(device)
    cache = cache_root(cache_dir)
    if name == "torch":
        from k4d_generator.backends.torch_backend import TorchBackend

        return TorchBackend(transformer, precision or "fp32", device)
    if name == "onnx":
        if precision not in (None, "fp32"):
            raise InvalidArgument.for_field("precision", "the onnx backend runs fp32")
        from k4d_generator.backends.onnx_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend(transformer, cache, model_id, device, threads)
    if name == "tensorrt":
        from k4d_generator.backends.tensorrt_backend import TensorRTBackend

        return TensorRTBackend(transformer, cache, model_id, precision or "fp16")
    raise InvalidArgument.for_field("backend", f"unknown backend {name!r}; choose one of "
                                               f"{list(BACKENDS)}")


def _check_device(device: str) -> None:
    """A device string torch cannot parse is the caller's mistake, not a crash."""
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidArgument.for_field("device", f"{device!r} is not a device; use cpu or "
                                                  "cuda[:N]") from None
