"""`k4d up`'s default model comes from the embedded runner (k4d_embedded.up_model), through
the runtime's `k4d.up` entry point group: the runtime imports no model library (ADR 023)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k4d.cli.up import UP_HOOKS
from k4d.errors import FailedPrecondition
from k4d.service import installed
from k4d.store.local import LocalStore
from k4d_embedded.shipped import DEFAULT_MODEL_ENV
from k4d_embedded.up_model import publish_default_model
from k4d_model import registry


def _shipped_folder(folder: Path) -> Path:
    """A shipped-model folder as `demo_model.py export` writes one (the files stand in for
    weights: publishing reads bytes, not tensors)."""
    weights = folder / "weights"
    weights.mkdir(parents=True)
    (weights / "k4d_model.json").write_text(json.dumps({"variant": "act"}))
    (weights / "transformer.safetensors").write_bytes(b"stand-in weights")
    manifest = registry.build_manifest(weights, "tiny-shipped", "1")
    manifest.update(weights_dir="weights", label="test", default=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_k4d_up_finds_the_hook_by_its_entry_point():
    assert installed(UP_HOOKS)["default_model"].load() is publish_default_model


def test_static_world_and_a_registry_reference_publish_nothing(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "store")
    monkeypatch.setenv(DEFAULT_MODEL_ENV, "static-world")
    assert publish_default_model(store) == ("", f"{DEFAULT_MODEL_ENV}=static-world")
    monkeypatch.setenv(DEFAULT_MODEL_ENV, "registry:someone/7")
    assert publish_default_model(store) == ("registry:someone/7", "given")
    assert registry.list_models(store) == {}


def test_a_shipped_folder_is_published_and_a_damaged_one_refused(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "store")
    folder = _shipped_folder(tmp_path / "shipped")
    monkeypatch.setenv(DEFAULT_MODEL_ENV, str(folder))
    assert publish_default_model(store) == ("registry:tiny-shipped/1", "published")
    assert registry.list_models(store) == {"tiny-shipped": ["1"]}
    (folder / "weights" / "transformer.safetensors").write_bytes(b"a Git LFS pointer")
    with pytest.raises(FailedPrecondition, match="does not match"):
        publish_default_model(LocalStore(tmp_path / "other"))
