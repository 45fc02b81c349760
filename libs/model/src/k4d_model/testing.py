"""Test support (never imported by serving code): the seeded tiny models (2 layers, 2 heads,
5 x 32 x 48 clips) of both variants, built once per process."""

from __future__ import annotations

import copy
from collections.abc import Callable


def tiny_model_factory() -> Callable[[str], tuple]:
    """-> make(variant="act") giving (components, lora) deep copies of the tiny model built
    with seed 0 (LoRA unfused): tests may mutate what they get."""
    from k4d_model.checkpoints import build_components
    from k4d_model.model.configs import get_model_config

    built: dict[str, tuple] = {}

    def make(variant: str = "act"):
        if variant not in built:
            built[variant] = build_components(get_model_config("tiny", variant), seed=0,
                                              lora_fused=False)
        components, lora = built[variant]
        return copy.deepcopy(components), copy.deepcopy(lora)

    return make
