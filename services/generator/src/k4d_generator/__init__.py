"""Kinema4D generator service: serving (gRPC, Kafka worker, CLI), the torch / ONNX Runtime /
TensorRT denoiser backends, outputs and the static-world generator.

The model domain code (DiT, conditions, checkpoints, LoRA, registry, pipeline core) lives in
the shared `k4d_model` library (import it from there: `k4d_model.checkpoints`, ...).

Importing this package is cheap: torch and diffusers are imported by the submodules that
need them (`k4d_generator.pipeline`, `k4d_model.model`).
"""

from __future__ import annotations

# The public API: what other packages (the composers: the embedded runner, policy
# evaluation) may import, always as `from k4d_generator import NAME` (tests/contract/
# test_service_imports.py). The rest of the package is internal.
from k4d_generator.api import sampling_kwargs
from k4d_generator.core import GenerationOutput, choose_backend, run_generation, uses_model
from k4d_generator.service import ModelManager

__all__ = ["GenerationOutput", "ModelManager", "__version__", "choose_backend", "run_generation",
           "sampling_kwargs", "uses_model"]
__version__ = "0.1.0"
