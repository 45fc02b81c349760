"""Fixtures of the trainer tests: a small synthetic episode dataset written with the shared
`k4d.episodes.DatasetWriter`, tiny seeded models in the official layout, recipe files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k4d_trainer.synthetic import write_dataset


@pytest.fixture(scope="session")
def episodes_dir(tmp_path_factory) -> str:
    return write_dataset(tmp_path_factory.mktemp("episodes") / "ds", count=4)


@pytest.fixture(scope="session")
def tiny_official(tmp_path_factory) -> Path:
    """OUT/base (Wan2.1-I2V diffusers layout) + OUT/kinema4d (added weights), tiny, seeded."""
    from k4d_model.checkpoints import build_components, save_official
    from k4d_model.model.configs import get_model_config

    out = tmp_path_factory.mktemp("tiny-official")
    components, _ = build_components(get_model_config("tiny"), seed=0)
    save_official(components, out / "base", out / "kinema4d")
    return out


def _recipe(tmp_path: Path, data_uri: str, base: str | None = None, **sections) -> Path:
    """A finetune-lora recipe (or from-scratch with model.size) for the tiny model."""
    config = {
        "recipe": "finetune-lora", "seed": 3,
        "model": {"base": base, "lora_rank": 4, "lora_alpha": 8, "activation_checkpointing": True,
                  "num_frames": 5, "height": 32, "width": 48},
        "data": {"uri": data_uri},
        "training": {"steps": 4, "global_batch_size": 2, "lr": 1e-3, "warmup_steps": 1},
        "checkpoint": {"every": 2},
        "observability": {"progress_bar": False, "tensorboard": False},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def recipe():
    """recipe(tmp_path, data_uri, base, **section overrides) -> path of a tiny recipe file."""
    return _recipe


@pytest.fixture(scope="session")
def make_dataset():
    """make_dataset(root, count, frames=, height=, width=) -> dataset URI."""
    return write_dataset
