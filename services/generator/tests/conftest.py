"""Shared fixtures: tiny seeded models (2 layers, 2 heads, 5 x 32 x 48 clips) and a synthetic
robot condition (a box moving across the image)."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_model.testing import tiny_model_factory


@pytest.fixture(scope="session")
def tiny_config():
    from k4d_model.model.configs import get_model_config

    return get_model_config("tiny")


@pytest.fixture(scope="session")
def make_tiny():
    """make_tiny(variant) -> (components, lora) deep copies: tests may mutate them."""
    return tiny_model_factory()


def synthetic_robot(num_frames: int = 5, height: int = 32, width: int = 48, seed: int = 0):
    """A 12 x 14 px box sliding right; pointmap ~0.8 m in front of the camera."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((num_frames, height, width), bool)
    for t in range(num_frames):
        mask[t, 8:20, 6 + 3 * t: 20 + 3 * t] = True
    colour = rng.integers(60, 255, size=(num_frames, height, width, 3))
    rgb = np.where(mask[..., None], colour, 0).astype(np.uint8)
    v, u = np.mgrid[0:height, 0:width].astype(np.float32)
    z = 0.8 + 0.01 * np.arange(num_frames, dtype=np.float32)[:, None, None]
    points = np.stack([np.broadcast_to((u - 23.5) / 40.0 * z, mask.shape),
                       np.broadcast_to((v - 15.5) / 40.0 * z, mask.shape),
                       np.broadcast_to(z, mask.shape)], axis=-1)
    pointmap = np.where(mask[..., None], points, 0.0).astype(np.float32)
    image = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    return image, {"robot_rgb": rgb, "robot_pointmap": pointmap, "robot_mask": mask}


@pytest.fixture
def robot_inputs():
    return synthetic_robot()


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory):
    """One export cache for the whole session: the tiny model is exported once."""
    return tmp_path_factory.mktemp("onnx_cache")


@pytest.fixture
def make_robot():
    """make_robot(num_frames, height, width, seed) -> (image, robot kwargs)."""
    return synthetic_robot


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny k4d-layout checkpoint written by `k4d generate init-model` (LoRA stored unfused)."""
    from k4d.cli.main import main

    out = tmp_path_factory.mktemp("models") / "tiny"
    assert main(["generate", "init-model", "--config", "tiny", "--out", str(out)]) == 0
    return out
