"""Probes for optional dependencies; each runs once per process and imports nothing heavy."""

from __future__ import annotations

import importlib.util
from functools import cache


@cache
def is_onnxruntime_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx",
                                                                 "onnxscript"))


@cache
def is_tensorrt_available() -> bool:
    return importlib.util.find_spec("tensorrt") is not None


@cache
def is_torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
