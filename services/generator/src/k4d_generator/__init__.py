"""Kinema4D generator: the DiT (official-checkpoint compatible), checkpoints, the
sampling pipeline and its torch / ONNX Runtime / TensorRT backends.

Importing this package is cheap: torch and diffusers are imported by the
submodules that need them (`k4d_generator.pipeline`, `k4d_generator.model`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "cache_root"]
__version__ = "0.1.0"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where exported graphs, engines and registry downloads are kept: `cache_dir`, or
    ~/.cache/k4d/generator (one default for the backends and the registry)."""
    return Path(cache_dir) if cache_dir else Path.home() / ".cache" / "k4d" / "generator"
