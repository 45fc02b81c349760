"""Kinema4D conditioning operations, as pure functions over the transformer's parameters.

The parameters themselves live on `Kinema4DTransformer3DModel` under the
official names (`learnable_domain_embeddings`, `patch_embedding_arm`, `arm_ln`,
`arm_pos_emb`, `arm_domain_emb`, `arm_patch_proj`, `arm_cond_proj`) so that
`added_weights.safetensors` loads key for key.

Shapes (B batch, z = 16 latent channels, m = 4 mask channels, F latent frames,
h latent height, w latent width of ONE modality; the DiT input is RGB | pointmap
concatenated along width, so its width is 2w):
- hidden_states: (B, z + m + z, F, h, 2w) = [noisy | first-frame mask | condition latents]
- arm_cond: (B, m + z, F, h, 2w) for `act`, (B, m + z, F, h, w) for `pmcond`
  = [robot occupancy mask | robot latents]
"""

from __future__ import annotations

import torch
from k4d.errors import InvalidArgument
from torch import nn


def inject_arm_latents(hidden_states: torch.Tensor, arm_cond: torch.Tensor, arm_cond_proj: nn.Linear,
                       variant: str, latent_channels: int, mask_channels: int,
                       arm_latent_gain: torch.Tensor | None = None) -> torch.Tensor:
    """Path (a): write the robot mask into the mask channels and ADD the zero-initialised
    projection of the robot latents to the condition channels.

    `act`: latent frames 1.. on both halves. `pmcond`: every latent frame, pointmap
    half only. Returns a new tensor (the official code edits its input in place; see
    `arm_latent_gain`).

    arm_latent_gain: (B,) multiplier of the projected robot latents, 1 by default.
    The official release's unconditional CFG pass sees them added twice (gain 2)
    because its first pass mutates the shared input tensor; the pipeline's
    `guidance_mode="official"` reproduces that with gain 2.
    """
    z, m = latent_channels, mask_channels
    noisy = hidden_states[:, :z]
    mask = hidden_states[:, z: z + m]
    cond = hidden_states[:, z + m:]
    arm_mask = arm_cond[:, :m].to(hidden_states.dtype)
    arm_feat = arm_cond[:, m:].to(hidden_states.dtype)
    if variant == "act":
        arm_mask, arm_feat = arm_mask[:, :, 1:], arm_feat[:, :, 1:]
    projected = arm_cond_proj(arm_feat.permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
    if arm_latent_gain is not None:
        projected = projected * arm_latent_gain.to(projected.dtype).view(-1, 1, 1, 1, 1)
    if variant == "act":
        mask = torch.cat([mask[:, :, :1], arm_mask], dim=2)
        cond = torch.cat([cond[:, :, :1], cond[:, :, 1:] + projected], dim=2)
    else:
        half = hidden_states.shape[-1] // 2
        mask = torch.cat([mask[..., :half], arm_mask], dim=-1)
        cond = torch.cat([cond[..., :half], cond[..., half:] + projected], dim=-1)
    return torch.cat([noisy, mask, cond], dim=1)


def shared_rope(rope: nn.Module, hidden_states: torch.Tensor, patch_size: tuple[int, int, int]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary (cos, sin), each (1, N, 1, head_dim), computed for width/2 and duplicated so the
    RGB and pointmap tokens at the same pixel share positions."""
    half = hidden_states[..., : hidden_states.shape[-1] // 2]
    cos, sin = rope(half)
    f, h, w = (s // p for s, p in zip(half.shape[2:], patch_size, strict=True))

    def duplicate(freqs: torch.Tensor) -> torch.Tensor:
        grid = freqs.reshape(f, h, w, -1)
        return torch.cat([grid, grid], dim=2).reshape(1, f * h * 2 * w, 1, -1)

    return duplicate(cos), duplicate(sin)


def add_domain_embeddings(patches: torch.Tensor, domain_embeddings: torch.Tensor) -> torch.Tensor:
    """patches: (B, C, F, H, W) after patch embedding; row 0 added to the left (RGB) half,
    row 1 to the right (pointmap) half."""
    half = patches.shape[-1] // 2
    rgb_emb, pm_emb = domain_embeddings.to(patches.dtype)[:, :, None, None, None]
    return torch.cat([patches[..., :half] + rgb_emb, patches[..., half:] + pm_emb], dim=-1)


def arm_tokens(model, arm_cond: torch.Tensor) -> torch.Tensor:
    """Path (b): arm cross-attention tokens (B, A, dim); A = 2 * prod(arm_grid) for `act`
    (624 at 480x720), prod(arm_grid) for `pmcond` (312)."""
    x = model.patch_embedding_arm(arm_cond.to(model.patch_embedding_arm.weight.dtype))
    expected = tuple(model.arm_pos_emb.shape[2:])
    halves = 2 if model.config.variant == "act" else 1
    got = (x.shape[2], x.shape[3], x.shape[4] // halves)
    if got != expected:
        raise InvalidArgument.for_field(
            "arm_cond", f"robot condition gives an arm-token grid of {got} (frames, h, w per half) "
                        f"but the model was trained for {expected}; use the model's clip size")
    x = model.arm_act(model.arm_ln(x.permute(0, 2, 3, 4, 1))).permute(0, 4, 1, 2, 3)
    if halves == 2:
        gw = expected[2]
        rgb_dom, pm_dom = model.arm_domain_emb.to(x.dtype)[:, :, None, None, None]
        x = torch.cat([x[..., :gw] + model.arm_pos_emb + rgb_dom,
                       x[..., gw:] + model.arm_pos_emb + pm_dom], dim=-1)
    else:
        x = x + model.arm_pos_emb
    return model.arm_patch_proj(x.flatten(2).transpose(1, 2))
