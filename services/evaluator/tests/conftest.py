"""Frames and clouds the evaluator tests share."""

from __future__ import annotations

import numpy as np
import pytest


def real_looking_frames(rng: np.random.Generator, frames: int = 3, height: int = 48,
                        width: int = 64) -> np.ndarray:
    """(T, H, W, 3) uint8 with smooth gradients, flat regions and edges, like camera frames."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    out = np.empty((frames, height, width, 3), dtype=np.uint8)
    for t in range(frames):
        base = 90 + 60 * np.sin(xx / 9.0 + t / 3) * np.cos(yy / 7.0)
        box = ((xx - 20 - 2 * t) ** 2 + (yy - 24) ** 2 < 120) * 80.0
        img = np.stack([base + box, base * 0.8 + 30, 200 - base * 0.5 + box * 0.3], axis=-1)
        out[t] = np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)
    return out


@pytest.fixture
def frames():
    """real_looking_frames(rng, frames=3, height=48, width=64)."""
    return real_looking_frames


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
