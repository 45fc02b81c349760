"""Learning-rate schedules shared by the transformer loop and the VAE stage."""

from __future__ import annotations

import math


def lr_lambda(warmup: int, total: int, schedule: str):
    """Linear warmup over `warmup` steps, then constant / cosine / linear decay to 0."""

    def factor(step: int) -> float:  # step = optimizer steps taken so far
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return max(0.0, 1.0 - progress)

    return factor
