"""The Kinema4D transformer: shapes of the added weights, conditioning semantics, and a
re-derivation of the official forward (in-place edits, complex float64 RoPE)."""

from __future__ import annotations

import math

import pytest
import torch
from diffusers.models.embeddings import get_1d_rotary_pos_embed
from k4d.errors import InvalidArgument
from k4d_model.model import Kinema4DTransformer3DModel, get_model_config
from k4d_model.model.conditioning import inject_arm_latents, shared_rope


def _inputs(model, batch=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    f, h, w = cfg.arm_grid[0], 4, 6  # tiny: latent 2 x 4 x 6 per half
    arm_w = 2 * w if cfg.variant == "act" else w
    return (torch.randn(batch, 36, f, h, 2 * w, generator=g), torch.full((batch,), 700.0),
            torch.randn(batch, cfg.num_image_tokens, cfg.image_dim, generator=g),
            torch.randn(batch, 20, f, h, arm_w, generator=g))


def test_model_official_added_weight_shapes_on_meta_device():
    """wan14b is only ever built on the meta device: shapes must be REFERENCE's exactly."""
    config = get_model_config("wan14b")
    with torch.device("meta"):
        act = Kinema4DTransformer3DModel(**config.transformer)
        pm = Kinema4DTransformer3DModel(**config.with_variant("pmcond").transformer)
    shapes = {k: tuple(v.shape) for k, v in act.state_dict().items()}
    assert shapes["learnable_domain_embeddings"] == (2, 5120)
    assert shapes["patch_embedding_arm.weight"] == (128, 20, 1, 15, 15)
    assert shapes["patch_embedding_arm.bias"] == (128,)
    assert shapes["arm_ln.weight"] == shapes["arm_ln.bias"] == (128,)
    assert shapes["arm_pos_emb"] == (1, 128, 13, 4, 6)
    assert shapes["arm_domain_emb"] == (2, 128)
    assert shapes["arm_patch_proj.weight"] == (5120, 128)
    assert shapes["arm_cond_proj.weight"] == (16, 16)
    assert shapes["patch_embedding.weight"] == (5120, 36, 1, 2, 2)
    assert act.num_arm_tokens == 624 and pm.num_arm_tokens == 312
    assert "arm_domain_emb" not in pm.state_dict()
    params = sum(math.prod(p.shape) for p in act.parameters())
    assert 16.0e9 < params < 17.5e9  # Wan2.1-I2V-14B (with CLIP image path) + Kinema4D


def test_model_forward_shapes_both_variants(make_tiny):
    for variant in ("act", "pmcond"):
        model = make_tiny(variant)[0].transformer
        x, t, img, arm = _inputs(model, batch=2)
        with torch.no_grad():
            out = model(x, t, img, arm).sample
        assert out.shape == (2, 16, 2, 4, 12)
        assert torch.isfinite(out).all()


def test_model_arm_grid_mismatch_is_a_clear_error(make_tiny):
    model = make_tiny("act")[0].transformer
    x, t, img, arm = _inputs(model)
    with pytest.raises(InvalidArgument, match="arm-token grid"):
        model(x[..., :8], t, img, arm[..., :8])


def test_model_shared_rope_duplicates_positions_across_halves(make_tiny):
    model = make_tiny("act")[0].transformer
    x = torch.zeros(1, 36, 2, 4, 12)
    cos, sin = shared_rope(model.rope, x, (1, 2, 2))
    grid_cos = cos.reshape(2, 2, 6, -1)  # frames, rows, columns (RGB 0..2 | pointmap 3..5)
    assert torch.equal(grid_cos[:, :, :3], grid_cos[:, :, 3:])
    assert not torch.equal(grid_cos[:, :, 0], grid_cos[:, :, 1])
    assert torch.equal(sin.reshape(2, 2, 6, -1)[:, :, :3], sin.reshape(2, 2, 6, -1)[:, :, 3:])


def test_model_arm_latent_injection_act_and_pmcond():
    proj = torch.nn.Linear(16, 16)
    x = torch.randn(1, 36, 3, 2, 4)
    arm = torch.randn(1, 20, 3, 2, 4)
    out = inject_arm_latents(x, arm, proj, "act", 16, 4)
    assert torch.equal(out[:, :16], x[:, :16])  # noisy latents untouched
    assert torch.equal(out[:, 16:20, 0], x[:, 16:20, 0])  # first-frame mask kept
    assert torch.equal(out[:, 16:20, 1:], arm[:, :4, 1:])  # robot mask written
    added = proj(arm[:, 4:, 1:].permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
    assert torch.allclose(out[:, 20:, 1:], x[:, 20:, 1:] + added)
    assert torch.equal(out[:, 20:, 0], x[:, 20:, 0])

    arm_pm = torch.randn(1, 20, 3, 2, 2)
    out = inject_arm_latents(x, arm_pm, proj, "pmcond", 16, 4)
    assert torch.equal(out[..., :2], x[..., :2])  # RGB half untouched
    assert torch.equal(out[:, 16:20, :, :, 2:], arm_pm[:, :4])  # every frame, pointmap half
    added = proj(arm_pm[:, 4:].permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
    assert torch.allclose(out[:, 20:, :, :, 2:], x[:, 20:, :, :, 2:] + added)
    assert not x.data_ptr() == out.data_ptr()


# ------------------------------------------------------------------ official re-derivation

class _OfficialStyleSelfAttn:
    """Self-attention as the release computes it: RoPE by complex multiplication in float64."""

    def __init__(self, freqs):
        self.freqs = freqs

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        q = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        k = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        v = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1)).transpose(1, 2)

        def rotate(x):
            xc = torch.view_as_complex(x.to(torch.float64).unflatten(3, (-1, 2)))
            return torch.view_as_real(xc * self.freqs).flatten(3, 4).type_as(x)

        out = torch.nn.functional.scaled_dot_product_attention(rotate(q), rotate(k), v)
        return attn.to_out[0](out.transpose(1, 2).flatten(2, 3))


class _OfficialStyleCrossAttn:
    """Cross-attention as the release splits it: the LAST `num_arm` context tokens are the
    'text' (arm) tokens, everything before them the image tokens."""

    def __init__(self, num_arm):
        self.num_arm = num_arm

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        split = encoder_hidden_states.shape[1] - self.num_arm
        img, txt = encoder_hidden_states[:, :split], encoder_hidden_states[:, split:]

        def heads(x):
            return x.unflatten(2, (attn.heads, -1)).transpose(1, 2)

        sdpa = torch.nn.functional.scaled_dot_product_attention
        q = heads(attn.norm_q(attn.to_q(hidden_states)))
        out_img = sdpa(q, heads(attn.norm_added_k(attn.add_k_proj(img))), heads(attn.add_v_proj(img)))
        out = sdpa(q, heads(attn.norm_k(attn.to_k(txt))), heads(attn.to_v(txt)))
        out = out.transpose(1, 2).flatten(2, 3) + out_img.transpose(1, 2).flatten(2, 3)
        return attn.to_out[0](out)


def _official_freqs(model, f, h, w_half):
    d = model.config.attention_head_dim
    parts = [get_1d_rotary_pos_embed(n, 1024, 10000.0, use_real=False, freqs_dtype=torch.float64)
             for n in (d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6))]
    ft, fh, fw = (p[:n] for p, n in zip(parts, (f, h, w_half), strict=True))
    ft = ft.view(f, 1, 1, -1).expand(f, h, w_half, -1)
    fh = fh.view(1, h, 1, -1).expand(f, h, w_half, -1)
    fw = fw.view(1, 1, w_half, -1).expand(f, h, w_half, -1)
    grid = torch.cat([ft, fh, fw], dim=-1)
    return torch.cat([grid, grid], dim=2).reshape(1, 1, f * h * 2 * w_half, -1)


def _official_forward(model, hidden_states, timestep, image_embeds, arm_cond_ori):
    """The released `WanTransformer3DModelDembSameRope.forward`, step by step, for its `act`
    file and its `pmcond` file (the two differ only where marked)."""
    act = model.config.variant == "act"
    hidden_states = hidden_states.clone()
    arm = arm_cond_ori[:, :, 1:] if act else arm_cond_ori
    feat = model.arm_cond_proj(arm[:, 4:].permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
    trans = torch.zeros_like(hidden_states)
    if act:
        trans[:, 20:, 1:] = feat
        hidden_states += trans
        hidden_states[:, 16:20, 1:] = arm[:, :4]
    else:
        trans[:, 20:, :, :, trans.shape[4] // 2:] = feat
        hidden_states += trans
        hidden_states[:, 16:20, :, :, hidden_states.shape[4] // 2:] = arm[:, :4]
    b, _, f, h, w = hidden_states.shape
    x = model.patch_embedding(hidden_states)
    d0, d1 = model.learnable_domain_embeddings.chunk(2, dim=0)
    pw = w // 2
    x = torch.cat([x[..., : pw // 2] + d0[..., None, None, None],
                   x[..., pw // 2:] + d1[..., None, None, None]], dim=4)
    x = x.flatten(2).transpose(1, 2)
    emb = model.condition_embedder
    temb = emb.time_embedder(emb.timesteps_proj(timestep))
    tproj = emb.time_proj(emb.act_fn(temb)).unflatten(1, (6, -1))
    img = emb.image_embedder(image_embeds)
    a = model.patch_embedding_arm(arm_cond_ori)
    a = model.arm_act(model.arm_ln(a.permute(0, 2, 3, 4, 1))).permute(0, 4, 1, 2, 3)
    if act:
        e0, e1 = model.arm_domain_emb.chunk(2, dim=0)
        gw = model.arm_pos_emb.shape[-1]
        a = torch.cat([a[..., :gw] + model.arm_pos_emb + e0[..., None, None, None],
                       a[..., gw:] + model.arm_pos_emb + e1[..., None, None, None]], dim=4)
    else:
        a = a + model.arm_pos_emb
    a = model.arm_patch_proj(a.flatten(2).transpose(1, 2))
    context = torch.cat([img, a], dim=1)
    for block in model.blocks:
        x = block(x, context, tproj, None)
    shift, scale = (model.scale_shift_table + temb.unsqueeze(1)).chunk(2, dim=1)
    x = model.proj_out(model.norm_out(x.float()) * (1 + scale) + shift)
    x = x.reshape(b, f, h // 2, w // 2, 1, 2, 2, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
    return x.flatten(6, 7).flatten(4, 5).flatten(2, 3)


@pytest.mark.parametrize("variant", ["act", "pmcond"])
def test_model_forward_equals_official_rederivation(make_tiny, variant):
    model = make_tiny(variant)[0].transformer
    x, t, img, arm = _inputs(model)
    with torch.no_grad():
        ours = model(x, t, img, arm).sample
        freqs = _official_freqs(model, 2, 2, 3)
        saved = [(blk.attn1.processor, blk.attn2.processor) for blk in model.blocks]
        for blk in model.blocks:
            blk.attn1.set_processor(_OfficialStyleSelfAttn(freqs))
            blk.attn2.set_processor(_OfficialStyleCrossAttn(model.num_arm_tokens))
        try:
            reference = _official_forward(model, x, t, img, arm)
        finally:
            for blk, (self_proc, cross_proc) in zip(model.blocks, saved, strict=True):
                blk.attn1.set_processor(self_proc)
                blk.attn2.set_processor(cross_proc)
    assert torch.allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_model_tool_embedding_starts_as_the_model_and_then_reads_the_tool(make_tiny, tmp_path):
    model = make_tiny("act")[0].transformer
    x, t, img, arm = _inputs(model, batch=2)
    tool = torch.rand(2, x.shape[2], 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(x, t, img, arm).sample
        model.add_tool_embedding(4)
        assert model.config.tool_features == 4
        assert torch.equal(model(x, t, img, arm, tool_cond=tool).sample, before)
        torch.nn.init.normal_(model.tool_embedding[2].weight, std=0.1)
        moved = model(x, t, img, arm, tool_cond=tool).sample
        other = model(x, t, img, arm, tool_cond=tool.flip(0)).sample
    assert not torch.allclose(moved, before)
    assert not torch.allclose(moved[0], other[0])  # each sample reads its own tool
    # saved and built again from its config, it still reads the tool
    model.save_config(tmp_path)
    rebuilt = Kinema4DTransformer3DModel.from_config(Kinema4DTransformer3DModel.load_config(tmp_path))
    assert rebuilt.config.tool_features == 4 and hasattr(rebuilt, "tool_embedding")


def test_model_tool_condition_is_required_exactly_when_the_model_reads_it(make_tiny):
    model = make_tiny("act")[0].transformer
    x, t, img, arm = _inputs(model)
    with pytest.raises(ValueError, match="no tool condition"):
        model(x, t, img, arm, tool_cond=torch.zeros(1, x.shape[2], 4))
    model.add_tool_embedding(4)
    with pytest.raises(ValueError, match="reads a tool condition"):
        model(x, t, img, arm)
    with pytest.raises(ValueError, match=r"tool_cond must be \(1, 2, 4\)"):
        model(x, t, img, arm, tool_cond=torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="already reads"):
        model.add_tool_embedding(4)
