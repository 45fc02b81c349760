"""Learning-rate schedules shared by the transformer loop and the VAE stage."""

from __future__ import annotations

import math


def lr_lambda(warmup: int, total: int, schedule: str, decay: int = 0):
    """Linear warmup over `warmup` steps, then constant / cosine / linear decay to 0.

    `decay` > 0 with the constant schedule is warmup-stable-decay: constant, then a linear
    decay to 0 over the last `decay` steps. A run resumed with more steps moves the decay
    to its new end, so a constant run can be continued and cooled down later."""

    def factor(step: int) -> float:  # step = optimizer steps taken so far
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0 if decay <= 0 else max(0.0, min(1.0, (total - step) / decay))
        progress = (step - warmup) / max(1, total - warmup)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return max(0.0, 1.0 - progress)

    return factor
