"""`create_backend(name, ...)`: the one place that maps a backend name to its class."""

from __future__ import annotations

from pathlib import Path

from k4d.errors import FailedPrecondition, InvalidArgument
from k4d_model import cache_root

BACKENDS = ("torch", "onnx", "tensorrt")


def create_backend(name: str, transformer, *, precision: str | None = None, device: str = "cpu",
                   cache_dir: str | Path | None = None, model_id: str = "model",
                   threads: int | None = None):
    """Build a denoiser backend around a loaded transformer (LoRA already fused).

    precision: torch fp32|bf16|fp16 (default fp32); onnx fp32; tensorrt fp16|fp32 (default
    fp16; fp8 is refused: no explicit FP8 quantisation exists, see tensorrt_backend).
    cache_dir: where exported ONNX graphs and TensorRT engines are kept.
    """
    check_backend_precision(name, precision)
    _check_device(device)
    cache = cache_root(cache_dir)
    if name == "torch":
        from k4d_generator.backends.torch_backend import TorchBackend

        return TorchBackend(transformer, precision or "fp32", device)
    if transformer.reads_tool:
        raise FailedPrecondition(f"backend {name}: this model's transformer reads the tool "
                                 "condition, which its exported graph does not take; use the "
                                 "torch backend")
    if name == "onnx":
        from k4d_generator.backends.onnx_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend(transformer, cache, model_id, device, threads)
    if name == "tensorrt":
        from k4d_generator.backends.tensorrt_backend import TensorRTBackend

        return TensorRTBackend(transformer, cache, model_id, precision or "fp16")
    raise AssertionError(name)  # check_backend_precision refused it


def check_backend_precision(name: str, precision: str | None) -> None:
    """InvalidArgument unless `name` is a backend and runs `precision` (None = its default);
    cheap (no model, no GPU), so callers check before loading minutes of weights."""
    if name == "torch":
        from k4d_generator.backends.torch_backend import DTYPES

        if precision is not None and precision not in DTYPES:
            raise InvalidArgument.for_field("precision", f"must be one of {sorted(DTYPES)}")
    elif name == "onnx":
        if precision not in (None, "fp32"):
            raise InvalidArgument.for_field("precision", "the onnx backend runs fp32")
    elif name == "tensorrt":
        if precision is not None:
            from k4d_generator.backends.tensorrt_backend import check_precision

            check_precision(precision)
    else:
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
