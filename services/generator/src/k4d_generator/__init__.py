"""Kinema4D generator: the DiT (official-checkpoint compatible), checkpoints, the
sampling pipeline and its torch / ONNX Runtime / TensorRT backends.

Importing this package is cheap: torch and diffusers are imported by the
submodules that need them (`k4d_generator.pipeline`, `k4d_generator.model`).
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
