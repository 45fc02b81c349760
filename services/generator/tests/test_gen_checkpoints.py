"""Checkpoint layouts: official (Wan base + added weights + LoRA x0.5) and ours; LoRA
fusion numerics; shape errors; the registry in the object store."""

from __future__ import annotations

import json

import pytest
import torch
from k4d.errors import FailedPrecondition, InvalidArgument, NotFound
from k4d_model.checkpoints import (
    ADDED_WEIGHTS_FILE,
    load_k4d,
    load_model,
    load_official,
    save_k4d,
    save_official,
)
from k4d_model.lora import LORA_FILE_NAME, fuse_lora, read_lora, write_lora
from safetensors import safe_open
from safetensors.torch import load_file, save_file

TINY = dict(num_frames=5, height=32, width=48)


def _forward(transformer, seed=0):
    g = torch.Generator().manual_seed(seed)
    variant = transformer.config.variant
    x = torch.randn(1, 36, 2, 4, 12, generator=g)
    img = torch.randn(1, 17, 32, generator=g)
    arm = torch.randn(1, 20, 2, 4, 12 if variant == "act" else 6, generator=g)
    with torch.no_grad():
        return transformer(x, torch.tensor([321.0]), img, arm).sample


def _fused_reference(components, lora, scale=0.5):
    """The in-memory model with W + scale * B @ A applied by hand."""
    import copy

    reference = copy.deepcopy(components.transformer)
    with torch.no_grad():
        for module, (down, up) in lora.items():
            reference.get_submodule(module).weight += scale * (up @ down)
    return reference


@pytest.mark.parametrize("variant", ["act", "pmcond"])
def test_gen_official_layout_roundtrip_identical(make_tiny, tmp_path, variant):
    components, lora = make_tiny(variant)
    save_official(components, tmp_path / "base", tmp_path / "kinema4d", lora=lora)
    loaded = load_official(tmp_path / "base", tmp_path / "kinema4d", **TINY)
    assert loaded.info.variant == variant and loaded.info.lora["scale"] == 0.5
    assert torch.equal(_forward(loaded.transformer), _forward(_fused_reference(components, lora)))


def test_gen_official_layout_files_are_genuine_diffusers(make_tiny, tmp_path):
    """diffusers' own Wan class loads the base transformer with no missing/unexpected keys, and
    the LoRA keys are diffusers' `transformer.<module>.lora_A.weight`."""
    from diffusers import WanTransformer3DModel

    components, lora = make_tiny("act")
    save_official(components, tmp_path / "base", tmp_path / "kinema4d", lora=lora)
    _, info = WanTransformer3DModel.from_pretrained(str(tmp_path / "base" / "transformer"),
                                                    output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with safe_open(str(tmp_path / "kinema4d" / LORA_FILE_NAME), framework="pt") as f:
        keys = set(f.keys())
    assert "transformer.blocks.0.attn1.to_q.lora_A.weight" in keys
    assert "transformer.blocks.1.attn2.to_out.0.lora_B.weight" in keys
    assert len(keys) == 2 * 2 * 4 * 2  # layers x attns x projections x (A, B)
    added = load_file(str(tmp_path / "kinema4d" / ADDED_WEIGHTS_FILE))
    assert set(added) == {"learnable_domain_embeddings", "patch_embedding_arm.weight",
                          "patch_embedding_arm.bias", "arm_ln.weight", "arm_ln.bias",
                          "arm_pos_emb", "arm_domain_emb", "arm_patch_proj.weight",
                          "arm_patch_proj.bias", "arm_cond_proj.weight", "arm_cond_proj.bias"}


@pytest.mark.parametrize("store_lora", [True, False])
def test_gen_k4d_layout_roundtrip_identical(make_tiny, tmp_path, store_lora):
    components, lora = make_tiny("act")
    reference = _fused_reference(components, lora)
    if not store_lora:  # the trainer may ship weights with the LoRA already fused
        components.transformer = reference
    save_k4d(components, tmp_path / "m", lora=lora if store_lora else None)
    loaded = load_model(tmp_path / "m")
    assert loaded.info.layout == "k4d"
    assert torch.equal(_forward(loaded.transformer), _forward(reference))


@pytest.mark.parametrize("layout", ["k4d", "official"])
def test_gen_transformer_only_load_needs_no_vae_or_image_encoder(make_tiny, tmp_path, layout):
    """ONNX/TensorRT export and parity checks load the transformer alone: `vae/` and the
    image encoder's weights may be absent (a full load of the same directory still needs
    them and says so)."""
    import shutil

    components, lora = make_tiny("act")
    reference = _fused_reference(components, lora)
    if layout == "k4d":
        save_k4d(components, tmp_path / "m", lora=lora)
        model, base = tmp_path / "m", tmp_path / "m"
    else:
        save_official(components, tmp_path / "m" / "base", tmp_path / "m" / "kinema4d",
                      lora=lora)
        model, base = tmp_path / "m", tmp_path / "m" / "base"
    shutil.rmtree(base / "vae")
    for path in (base / "image_encoder").iterdir():  # the official layout keeps config.json:
        if layout == "k4d" or path.name != "config.json":  # it sizes the image context
            path.unlink()
    if layout == "k4d":
        (base / "image_encoder").rmdir()
    with pytest.raises(InvalidArgument, match="unreadable model files"):
        load_model(model, **TINY)
    loaded = load_model(model, transformer_only=True, **TINY)
    assert loaded.vae is None and loaded.image_encoder is None
    assert loaded.transformer.config.num_image_tokens == 17
    assert torch.equal(_forward(loaded.transformer), _forward(reference))


def test_gen_lora_fusion_equals_unfused_no_alpha_and_alpha(tmp_path):
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 6)
    model = torch.nn.Sequential(linear)
    down, up = torch.randn(4, 8), torch.randn(6, 4)
    original = linear.weight.detach().clone()
    x = torch.randn(3, 8)

    write_lora(tmp_path / "plain.safetensors", {"0": (down, up)})
    lora = read_lora(tmp_path / "plain.safetensors")
    assert lora.alpha is None
    fuse_lora(model, lora, 0.5)
    unfused = x @ original.T + linear.bias + 0.5 * (x @ down.T) @ up.T
    assert torch.allclose(model(x), unfused, atol=1e-5)
    assert torch.allclose(linear.weight, original + 0.5 * up @ down, atol=1e-6)

    with torch.no_grad():
        linear.weight.copy_(original)
    write_lora(tmp_path / "alpha.safetensors", {"0": (down, up)}, alpha=2.0, rank=4)
    lora = read_lora(tmp_path / "alpha.safetensors")
    assert lora.alpha == 2.0
    fuse_lora(model, lora, 0.5)
    assert torch.allclose(linear.weight, original + 0.5 * (2.0 / 4) * up @ down, atol=1e-6)


def test_gen_lora_bad_files_are_clear_errors(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 6))
    write_lora(tmp_path / "wrong.safetensors", {"0": (torch.randn(4, 7), torch.randn(6, 4))})
    with pytest.raises(InvalidArgument, match=r"\(6, 7\)"):
        fuse_lora(model, read_lora(tmp_path / "wrong.safetensors"))
    write_lora(tmp_path / "missing.safetensors", {"9": (torch.randn(4, 8), torch.randn(6, 4))})
    with pytest.raises(InvalidArgument, match="not a Linear"):
        fuse_lora(model, read_lora(tmp_path / "missing.safetensors"))
    save_file({"transformer.0.weird": torch.zeros(1)}, str(tmp_path / "odd.safetensors"))
    with pytest.raises(InvalidArgument, match="unexpected key"):
        read_lora(tmp_path / "odd.safetensors")


def test_gen_mismatched_checkpoint_shapes_are_clear_errors(make_tiny, tmp_path):
    components, lora = make_tiny("act")
    save_official(components, tmp_path / "base", tmp_path / "kinema4d", lora=lora)
    with pytest.raises(InvalidArgument, match="arm_pos_emb grid"):
        load_official(tmp_path / "base", tmp_path / "kinema4d", num_frames=9, height=32, width=48)
    with pytest.raises(InvalidArgument, match="requested 'pmcond'"):
        load_official(tmp_path / "base", tmp_path / "kinema4d", variant="pmcond", **TINY)
    added_path = tmp_path / "kinema4d" / ADDED_WEIGHTS_FILE
    added = load_file(str(added_path))
    added["arm_cond_proj.weight"] = torch.zeros(16, 8)
    save_file(added, str(added_path))
    with pytest.raises(InvalidArgument, match=r"arm_cond_proj.weight has shape \(16, 8\)"):
        load_official(tmp_path / "base", tmp_path / "kinema4d", **TINY)
    with pytest.raises(FailedPrecondition, match="--base"):
        load_model(tmp_path / "kinema4d")
    with pytest.raises(NotFound):
        load_model(tmp_path / "nowhere")


@pytest.mark.parametrize("damage", ["bad_json", "truncated_weights", "missing_vae"])
def test_gen_damaged_model_dir_is_a_model_field_error(tiny_model_dir, tmp_path, damage):
    import shutil

    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    if damage == "bad_json":
        (model / "k4d_model.json").write_text("{not json")
    elif damage == "truncated_weights":
        weights = model / "transformer" / "diffusion_pytorch_model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        shutil.rmtree(model / "vae")  # must not fall back to a Hub download of "<path>/vae"
    with pytest.raises(InvalidArgument, match="unreadable model files") as err:
        load_model(model)
    assert err.value.violations[0].field == "model"


def test_gen_k4d_layout_refuses_other_clip_size(make_tiny, tmp_path):
    components, _ = make_tiny("act")
    save_k4d(components, tmp_path / "m")
    with pytest.raises(InvalidArgument, match="trained for 5x32x48"):
        load_k4d(tmp_path / "m", num_frames=9)
    meta = json.loads((tmp_path / "m" / "k4d_model.json").read_text())
    assert meta["format"] == "k4d-generator-model" and meta["variant"] == "act"


def test_gen_registry_publish_fetch_verify(make_tiny, tmp_path):
    from k4d.errors import IntegrityError
    from k4d.store import LocalStore
    from k4d_model import registry

    components, lora = make_tiny("act")
    save_k4d(components, tmp_path / "m", lora=lora)
    store = LocalStore(tmp_path / "store")
    manifest = registry.publish(store, tmp_path / "m", "tiny-demo", "1")
    assert {f["path"] for f in manifest["files"]} >= {"k4d_model.json",
                                                       "transformer/config.json"}
    assert all(len(f["sha256"]) == 64 for f in manifest["files"])
    assert store.exists("models/tiny-demo/1/manifest.json")
    with pytest.raises(FailedPrecondition, match="immutable"):
        registry.publish(store, tmp_path / "m", "tiny-demo", "1")
    registry.publish(store, tmp_path / "m", "tiny-demo", "2")
    assert registry.list_models(store) == {"tiny-demo": ["1", "2"]}

    local = registry.resolve_registry_ref("registry:tiny-demo", store, tmp_path / "cache")
    assert local.name == "2"
    loaded = load_model(local)
    assert loaded.info.name == "tiny-demo" and loaded.info.version == "2"
    assert torch.equal(_forward(loaded.transformer),
                       _forward(_fused_reference(components, lora)))

    weights = store.root / "models/tiny-demo/1/transformer/diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"corrupt!")
    with pytest.raises(IntegrityError):
        registry.fetch(store, "tiny-demo", "1", tmp_path / "cache2")
    with pytest.raises(NotFound):
        registry.fetch(store, "tiny-demo", "9", tmp_path / "cache3")
    with pytest.raises(InvalidArgument):
        registry.parse_registry_ref("registry:../etc")


def test_gen_lora_files_written_by_diffusers_are_read(tmp_path):
    """diffusers' own `save_lora_weights` (what the official trainer calls) writes the keys
    and alpha metadata `read_lora` expects; our writer produces the same keys."""
    from diffusers import WanImageToVideoPipeline

    down, up = torch.randn(4, 8), torch.randn(6, 4)
    layers = {"blocks.0.attn1.to_q.lora_A.weight": down, "blocks.0.attn1.to_q.lora_B.weight": up}
    WanImageToVideoPipeline.save_lora_weights(tmp_path / "plain", transformer_lora_layers=layers)
    WanImageToVideoPipeline.save_lora_weights(
        tmp_path / "alpha", transformer_lora_layers=layers,
        transformer_lora_adapter_metadata={"r": 4, "lora_alpha": 2})
    plain = read_lora(tmp_path / "plain" / LORA_FILE_NAME)
    alpha = read_lora(tmp_path / "alpha" / LORA_FILE_NAME)
    assert plain.alpha is None and alpha.alpha == 2.0
    layer = plain.layers["blocks.0.attn1.to_q"]
    assert torch.equal(layer.down, down) and torch.equal(layer.up, up)
    write_lora(tmp_path / "ours.safetensors", {"blocks.0.attn1.to_q": (down, up)})
    with safe_open(str(tmp_path / "plain" / LORA_FILE_NAME), framework="pt") as theirs, \
            safe_open(str(tmp_path / "ours.safetensors"), framework="pt") as ours:
        assert set(theirs.keys()) == set(ours.keys())


def test_gen_official_base_with_sharded_weights(make_tiny, tmp_path):
    """The 14B base ships sharded (`diffusion_pytorch_model-0000x-of-0000y.safetensors` +
    index): the loader reads every shard."""
    components, lora = make_tiny("act")
    save_official(components, tmp_path / "base", tmp_path / "kinema4d", lora=lora)
    transformer_dir = tmp_path / "base" / "transformer"
    state = load_file(str(transformer_dir / "diffusion_pytorch_model.safetensors"))
    keys = sorted(state)
    shards = {"diffusion_pytorch_model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "diffusion_pytorch_model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for shard, names in shards.items():
        save_file({k: state[k] for k in names}, str(transformer_dir / shard))
    (transformer_dir / "diffusion_pytorch_model.safetensors").unlink()
    (transformer_dir / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: s for s, names in shards.items() for k in names}}))
    loaded = load_official(tmp_path / "base", tmp_path / "kinema4d", **TINY)
    assert torch.equal(_forward(loaded.transformer), _forward(_fused_reference(components, lora)))


def test_gen_registry_fetch_reuses_verified_cache_without_rehashing(make_tiny, tmp_path,
                                                                   monkeypatch):
    from pathlib import Path

    from k4d.store import LocalStore
    from k4d_model import registry

    components, _ = make_tiny("act")
    save_k4d(components, tmp_path / "m")
    store = LocalStore(tmp_path / "store")
    registry.publish(store, tmp_path / "m", "tiny-demo", "1")
    local = registry.fetch(store, "tiny-demo", "1", tmp_path / "cache")

    hashed, downloads = [], []
    real_hash, real_get = registry.sha256_file, store.get_file
    monkeypatch.setattr(registry, "sha256_file", lambda p: hashed.append(p) or real_hash(p))
    monkeypatch.setattr(store, "get_file", lambda *a, **k: downloads.append(a[0]) or real_get(*a, **k))
    assert registry.fetch(store, "tiny-demo", "1", tmp_path / "cache") == local
    # Only the locally rewritten k4d_model.json is checked again; the weights are trusted
    # by their stamps.
    assert {Path(p).name for p in hashed} <= {"k4d_model.json"}
    assert [Path(k).name for k in downloads] == ["k4d_model.json"]

    # A cached file changed behind the registry's back is hashed, found wrong and refetched.
    weights = local / "transformer" / "diffusion_pytorch_model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:-8] + b"tampered")
    hashed.clear()
    registry.fetch(store, "tiny-demo", "1", tmp_path / "cache")
    assert weights in [Path(p) for p in hashed] and weights.read_bytes() == original
    assert load_model(local).info.version == "1"


def test_gen_pipeline_is_the_model_library_pipeline_with_loaders():
    """The serving pipeline is the model library's pipeline plus the loading constructors."""
    from k4d_generator.pipeline import Kinema4DPipeline
    from k4d_model.pipeline import Kinema4DPipeline as Core

    assert issubclass(Kinema4DPipeline, Core)
