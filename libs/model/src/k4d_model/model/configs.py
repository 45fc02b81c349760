"""Named model sizes: `tiny` (CPU tests, seconds), `small` (CPU benchmarks), `small-f4`
(the demo world model of issue 45: a per-frame 4x VAE, k4d_model.frame_vae) and
`wan14b` (the official Kinema4D / Wan2.1-I2V-14B-480P sizes; never instantiated
in tests, only on the meta device for shape checks).

A `ModelConfig` bundles everything needed to build a complete model from
scratch: the transformer's constructor arguments, the VAE's, the CLIP image
encoder's, the clip geometry (frames x height x width) the arm-token grid is
tied to, and the sampling defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from k4d.errors import InvalidArgument

# The Wan VAE compresses 4x in time and 8x in space (REFERENCE section 2).
VAE_TEMPORAL_STRIDE = 4
VAE_SPATIAL_STRIDE = 8


def latent_shape(num_frames: int, height: int, width: int,
                 strides: tuple[int, int] = (VAE_TEMPORAL_STRIDE, VAE_SPATIAL_STRIDE)
                 ) -> tuple[int, int, int]:
    """Latent grid (frames, height, width) of ONE modality for a clip of the given size;
    `strides` (temporal, spatial) are the VAE's (k4d_model.frame_vae.vae_strides)."""
    temporal, spatial = strides
    return ((num_frames - 1) // temporal + 1, height // spatial, width // spatial)


def arm_grid_for(num_frames: int, height: int, width: int,
                 arm_patch_size: tuple[int, int, int],
                 strides: tuple[int, int] = (VAE_TEMPORAL_STRIDE, VAE_SPATIAL_STRIDE)
                 ) -> tuple[int, int, int]:
    """Arm-token grid per half for a clip: latent grid // arm patch (official: 13 x 4 x 6)."""
    lf, lh, lw = latent_shape(num_frames, height, width, strides)
    pt, ph, pw = arm_patch_size
    return (lf // pt, lh // ph, lw // pw)


@dataclass(frozen=True)
class ModelConfig:
    """A complete model description; `transformer` are `Kinema4DTransformer3DModel` kwargs."""

    name: str
    transformer: dict[str, Any]
    vae: dict[str, Any]
    image_encoder: dict[str, Any]
    num_frames: int
    height: int
    width: int
    num_inference_steps: int = 50
    guidance_scale: float = 5.0
    flow_shift: float = 3.0
    fps: int = 24
    lora_rank: int = 64
    extra: dict[str, Any] = field(default_factory=dict)

    def with_variant(self, variant: str) -> ModelConfig:
        return replace(self, transformer={**self.transformer, "variant": variant})


def _transformer_kwargs(*, heads: int, head_dim: int, layers: int, ffn: int, text_dim: int,
                        image_dim: int, freq_dim: int, num_frames: int, height: int, width: int,
                        arm_patch_size: tuple[int, int, int], num_image_tokens: int,
                        rope_max_seq_len: int = 1024, patch_size: tuple[int, int, int] = (1, 2, 2),
                        strides: tuple[int, int] = (VAE_TEMPORAL_STRIDE, VAE_SPATIAL_STRIDE)
                        ) -> dict[str, Any]:
    dim = heads * head_dim
    # input channels: 16 noisy latents + the first-frame mask (one channel per video frame
    # of a latent frame: the temporal stride) + 16 condition latents (REFERENCE section 2)
    return dict(
        patch_size=patch_size, num_attention_heads=heads, attention_head_dim=head_dim,
        in_channels=32 + strides[0], out_channels=16, text_dim=text_dim, freq_dim=freq_dim, ffn_dim=ffn,
        num_layers=layers, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
        image_dim=image_dim, added_kv_proj_dim=dim, rope_max_seq_len=rope_max_seq_len,
        pos_embed_seq_len=None, variant="act", arm_patch_size=arm_patch_size,
        arm_grid=arm_grid_for(num_frames, height, width, arm_patch_size, strides),
        arm_bottleneck_dim=head_dim, num_image_tokens=num_image_tokens,
    )


def _tiny() -> ModelConfig:
    frames, height, width = 5, 32, 48
    return ModelConfig(
        name="tiny",
        transformer=_transformer_kwargs(heads=2, head_dim=16, layers=2, ffn=64, text_dim=16,
                                        image_dim=32, freq_dim=32, num_frames=frames,
                                        height=height, width=width, arm_patch_size=(1, 2, 2),
                                        num_image_tokens=17, rope_max_seq_len=64),
        vae=dict(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                 temperal_downsample=[False, True, True]),
        image_encoder=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8, projection_dim=32),
        num_frames=frames, height=height, width=width, num_inference_steps=2, lora_rank=4,
    )


def _small() -> ModelConfig:
    frames, height, width = 13, 96, 144
    return ModelConfig(
        name="small",
        transformer=_transformer_kwargs(heads=4, head_dim=64, layers=4, ffn=1024, text_dim=64,
                                        image_dim=64, freq_dim=256, num_frames=frames,
                                        height=height, width=width, arm_patch_size=(1, 6, 6),
                                        num_image_tokens=257),
        vae=dict(base_dim=16, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                 temperal_downsample=[False, True, True]),
        image_encoder=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, image_size=224, patch_size=14, projection_dim=64),
        num_frames=frames, height=height, width=width, num_inference_steps=4, lora_rank=8,
    )


def _small_f4() -> ModelConfig:
    """`small`'s transformer on a per-frame VAE that compresses 4x (not 4x8x8): a latent
    frame per video frame and 4 x 4 pixels per cell, so a 12-pixel object spans 3 cells;
    patches of 4 x 4 cells keep the token count (13 x 6 x 18 = 1404) trainable on a CPU."""
    frames, height, width = 13, 96, 144
    strides = (1, 4)
    return ModelConfig(
        name="small-f4",
        transformer=_transformer_kwargs(heads=4, head_dim=64, layers=4, ffn=1024, text_dim=64,
                                        image_dim=64, freq_dim=256, num_frames=frames,
                                        height=height, width=width, arm_patch_size=(1, 12, 12),
                                        num_image_tokens=257, patch_size=(1, 4, 4),
                                        strides=strides),
        vae={"class": "FrameAutoencoder", "z_dim": 16, "channels": [48, 96, 128],
             "num_res_blocks": 1},
        image_encoder=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, image_size=224, patch_size=14, projection_dim=64),
        num_frames=frames, height=height, width=width, num_inference_steps=8, lora_rank=8,
        guidance_scale=1.0,  # trained without condition dropout: one pass, no guidance
    )


def _wan14b() -> ModelConfig:
    frames, height, width = 49, 480, 720
    return ModelConfig(
        name="wan14b",
        transformer=_transformer_kwargs(heads=40, head_dim=128, layers=40, ffn=13824,
                                        text_dim=4096, image_dim=1280, freq_dim=256,
                                        num_frames=frames, height=height, width=width,
                                        arm_patch_size=(1, 15, 15), num_image_tokens=257),
        vae=dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 temperal_downsample=[False, True, True]),
        image_encoder=dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                           num_attention_heads=16, image_size=224, patch_size=14,
                           projection_dim=1024, hidden_act="gelu"),
        num_frames=frames, height=height, width=width, num_inference_steps=50, lora_rank=64,
    )


MODEL_CONFIGS = {"tiny": _tiny, "small": _small, "small-f4": _small_f4, "wan14b": _wan14b}


def get_model_config(name: str, variant: str = "act") -> ModelConfig:
    """The named config (`tiny`, `small`, `small-f4`, `wan14b`) for the `act` or `pmcond`
    variant."""
    if name not in MODEL_CONFIGS:
        raise InvalidArgument.for_field("config", f"unknown model config {name!r}; "
                                        f"choose one of {sorted(MODEL_CONFIGS)}")
    if variant not in ("act", "pmcond"):
        raise InvalidArgument.for_field("variant", f"must be 'act' or 'pmcond', got {variant!r}")
    return MODEL_CONFIGS[name]().with_variant(variant)
