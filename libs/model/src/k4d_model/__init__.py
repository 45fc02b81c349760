"""Kinema4D model domain code shared by the generator service and the trainer: the DiT
(official-checkpoint compatible), its conditioning, the condition builders, checkpoint and
LoRA layouts, the model registry, the memory estimate and the sampling pipeline core.

It needs torch and diffusers, so it is a library of its own and not part of the torch-free
runtime (`k4d.*`; ADR 010). Importing this package is cheap: torch and diffusers are
imported by the submodules that need them (`k4d_model.pipeline`, `k4d_model.model`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "cache_root"]
__version__ = "0.1.0"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where exported graphs, engines and registry downloads are kept: `cache_dir`, or
    ~/.cache/k4d/generator (one default for the generator's backends and the registry)."""
    return Path(cache_dir) if cache_dir else Path.home() / ".cache" / "k4d" / "generator"
