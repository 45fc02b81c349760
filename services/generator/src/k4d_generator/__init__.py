"""Kinema4D generator service: serving (gRPC, Kafka worker, CLI), the torch / ONNX Runtime /
TensorRT denoiser backends, outputs and the static-world generator.

The model domain code (DiT, conditions, checkpoints, LoRA, registry, pipeline core) lives in
the shared `k4d_model` library (import it from there: `k4d_model.checkpoints`, ...).

Importing this package is cheap: torch and diffusers are imported by the submodules that
need them (`k4d_generator.pipeline`, `k4d_model.model`).
"""

from __future__ import annotations

__all__ = ["__version__"]
__version__ = "0.1.0"
