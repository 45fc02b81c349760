"""`Kinema4DTransformer3DModel`: diffusers' `WanTransformer3DModel` (Wan2.1-I2V) with the
Kinema4D conditioning.

It reuses diffusers' patch embedding, time / image embedders, transformer blocks
and output head unchanged (so a Wan2.1-I2V `transformer/` directory loads into it
key for key) and adds:
- RGB | pointmap width concatenation with one RoPE shared by both halves,
- `learnable_domain_embeddings` (2, dim) added per half after patch embedding,
- the robot condition `arm_cond`: path (a) into the input channels, path (b) as
  cross-attention tokens appended after the CLIP image tokens in place of text;
- optionally (`tool_features` > 0, not in the official model) the gripper's state per
  latent frame (k4d_model.conditions.tool_features), embedded and added to every token
  of its frame after patch embedding, from a zero-initialised projection so a model it
  is added to starts as it was.

The forward takes no text: the official model computes a text embedding and then
drops it, so skipping it changes nothing but the cost.
"""

from __future__ import annotations

import math

import torch
from diffusers import WanTransformer3DModel
from diffusers.configuration_utils import register_to_config
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from torch import nn

from k4d_model.model.attention import Kinema4DCrossAttnProcessor
from k4d_model.model.conditioning import (
    add_domain_embeddings,
    arm_tokens,
    inject_arm_latents,
    shared_rope,
)

# Names of the parameters the Kinema4D fine-tuning adds (its `added_weights.safetensors`).
ADDED_PARAMETER_PREFIXES = ("learnable_domain_embeddings", "patch_embedding_arm", "arm_ln",
                            "arm_pos_emb", "arm_domain_emb", "arm_patch_proj", "arm_cond_proj")


class Kinema4DTransformer3DModel(WanTransformer3DModel):
    """Wan2.1-I2V DiT + Kinema4D conditioning. Constructor arguments are the Wan ones plus:

    variant: "act" (robot RGB + pointmap condition) or "pmcond" (pointmap only).
    arm_patch_size: Conv3d kernel = stride of the arm tokens, official (1, 15, 15).
    arm_grid: arm tokens per half (frames, h, w), official (13, 4, 6) for 49 x 480 x 720.
    arm_bottleneck_dim: channels of the arm patch embedding, official 128.
    num_image_tokens: CLIP image tokens at the start of the context, 257 for ViT-H/14.
    tool_features: features per latent frame of the tool condition, 0 (the official
    model): none. `add_tool_embedding` adds it to a built model.
    """

    @register_to_config
    def __init__(
        self,
        patch_size: tuple[int, ...] = (1, 2, 2),
        num_attention_heads: int = 40,
        attention_head_dim: int = 128,
        in_channels: int = 36,
        out_channels: int = 16,
        text_dim: int = 4096,
        freq_dim: int = 256,
        ffn_dim: int = 13824,
        num_layers: int = 40,
        cross_attn_norm: bool = True,
        qk_norm: str | None = "rms_norm_across_heads",
        eps: float = 1e-6,
        image_dim: int | None = 1280,
        added_kv_proj_dim: int | None = 5120,
        rope_max_seq_len: int = 1024,
        pos_embed_seq_len: int | None = None,
        variant: str = "act",
        arm_patch_size: tuple[int, int, int] = (1, 15, 15),
        arm_grid: tuple[int, int, int] = (13, 4, 6),
        arm_bottleneck_dim: int = 128,
        num_image_tokens: int = 257,
        tool_features: int = 0,
    ) -> None:
        super().__init__(
            patch_size=patch_size, num_attention_heads=num_attention_heads,
            attention_head_dim=attention_head_dim, in_channels=in_channels,
            out_channels=out_channels, text_dim=text_dim, freq_dim=freq_dim, ffn_dim=ffn_dim,
            num_layers=num_layers, cross_attn_norm=cross_attn_norm, qk_norm=qk_norm, eps=eps,
            image_dim=image_dim, added_kv_proj_dim=added_kv_proj_dim,
            rope_max_seq_len=rope_max_seq_len, pos_embed_seq_len=pos_embed_seq_len,
        )
        if variant not in ("act", "pmcond"):
            raise ValueError(f"variant must be 'act' or 'pmcond', got {variant!r}")
        if image_dim is None or added_kv_proj_dim is None:
            raise ValueError("Kinema4D is image-to-video: image_dim and added_kv_proj_dim are required")
        inner_dim = num_attention_heads * attention_head_dim
        arm_channels = in_channels - 2 * out_channels + out_channels  # mask + robot latents (20)

        self.learnable_domain_embeddings = nn.Parameter(torch.zeros(2, inner_dim))
        self.patch_embedding_arm = nn.Conv3d(arm_channels, arm_bottleneck_dim,
                                             kernel_size=tuple(arm_patch_size),
                                             stride=tuple(arm_patch_size))
        self.arm_ln = nn.LayerNorm(arm_bottleneck_dim)
        self.arm_act = nn.GELU()
        self.arm_pos_emb = nn.Parameter(torch.zeros(1, arm_bottleneck_dim, *arm_grid))
        if variant == "act":
            self.arm_domain_emb = nn.Parameter(torch.zeros(2, arm_bottleneck_dim))
        self.arm_patch_proj = nn.Linear(arm_bottleneck_dim, inner_dim)
        self.arm_cond_proj = nn.Linear(out_channels, out_channels)
        self._init_added_weights()
        for block in self.blocks:
            block.attn2.set_processor(Kinema4DCrossAttnProcessor(num_image_tokens))
        if tool_features:
            self._build_tool_embedding(tool_features)

    def _build_tool_embedding(self, features: int) -> None:
        inner_dim = self.config.num_attention_heads * self.config.attention_head_dim
        self.tool_embedding = nn.Sequential(nn.Linear(features, inner_dim), nn.SiLU(),
                                            nn.Linear(inner_dim, inner_dim))
        nn.init.zeros_(self.tool_embedding[2].weight)
        nn.init.zeros_(self.tool_embedding[2].bias)

    def add_tool_embedding(self, features: int) -> None:
        """Give a built model the tool condition (`tool_features` in its config, saved
        with it). Its output projection starts at zero: the model's outputs do not change
        until it is trained."""
        if features < 1:
            raise ValueError(f"tool features must be >= 1, got {features}")
        if self.reads_tool:
            raise ValueError(f"the model already reads {self.config.tool_features} tool "
                             "features")
        self.register_to_config(tool_features=features)
        device = self.proj_out.weight.device
        self._build_tool_embedding(features)
        self.tool_embedding.to(device)

    @torch.no_grad()
    def _init_added_weights(self) -> None:
        """Fresh-model initialisation as in the official fine-tuning: projections into the
        pretrained network start at zero so the untrained model is the base model."""
        nn.init.trunc_normal_(self.arm_pos_emb, std=0.02)
        if self.config.variant == "act":
            nn.init.trunc_normal_(self.arm_domain_emb, std=0.02)
        for linear in (self.arm_patch_proj, self.arm_cond_proj):
            nn.init.zeros_(linear.weight)
            nn.init.zeros_(linear.bias)

    @property
    def latent_channels(self) -> int:
        return self.config.out_channels

    @property
    def mask_channels(self) -> int:
        return self.config.in_channels - 2 * self.config.out_channels

    @property
    def reads_tool(self) -> bool:
        """Whether the forward reads a tool condition (`tool_cond`)."""
        return bool(self.config.tool_features)

    @property
    def num_arm_tokens(self) -> int:
        per_half = math.prod(self.config.arm_grid)
        return 2 * per_half if self.config.variant == "act" else per_half

    def _time_embedding(self, timestep: torch.Tensor, dtype: torch.dtype):
        embedder = self.condition_embedder
        t_freq = embedder.timesteps_proj(timestep)
        t_dtype = next(iter(embedder.time_embedder.parameters())).dtype
        temb = embedder.time_embedder(t_freq.to(t_dtype)).to(dtype)
        timestep_proj = embedder.time_proj(embedder.act_fn(temb)).unflatten(1, (6, -1))
        return temb, timestep_proj

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states_image: torch.Tensor,
        arm_cond: torch.Tensor,
        arm_latent_gain: torch.Tensor | None = None,
        return_dict: bool = True,
        tool_cond: torch.Tensor | None = None,
    ):
        """Predict the flow velocity.

        hidden_states: (B, 36, F, h, 2w) = [noisy latents | first-frame mask | condition latents]
        timestep: (B,) in [0, 1000)
        encoder_hidden_states_image: (B, 257, 1280) CLIP penultimate hidden states
        arm_cond: (B, 20, F, h, 2w) (`act`) or (B, 20, F, h, w) (`pmcond`)
        arm_latent_gain: optional (B,), see `inject_arm_latents`
        tool_cond: (B, F, tool_features), required by a model with a tool condition and
            refused by one without
        returns: (B, 16, F, h, 2w)
        """
        if self.reads_tool != (tool_cond is not None):
            raise ValueError("this model reads a tool condition (tool_cond)" if self.reads_tool
                             else "this model has no tool condition; tool_cond must be None")
        hidden_states = inject_arm_latents(hidden_states, arm_cond, self.arm_cond_proj,
                                           self.config.variant, self.latent_channels,
                                           self.mask_channels, arm_latent_gain)
        batch_size, _, num_frames, height, width = hidden_states.shape
        p_t, p_h, p_w = self.config.patch_size
        post_f, post_h, post_w = num_frames // p_t, height // p_h, width // p_w

        rotary_emb = shared_rope(self.rope, hidden_states, tuple(self.config.patch_size))
        patches = self.patch_embedding(hidden_states)
        patches = add_domain_embeddings(patches, self.learnable_domain_embeddings)
        if self.reads_tool:  # (B, F, dim) -> added to every token of its frame
            want = (batch_size, patches.shape[2], self.config.tool_features)
            if tuple(tool_cond.shape) != want:
                raise ValueError(f"tool_cond must be {want}, got {tuple(tool_cond.shape)}")
            tool = self.tool_embedding(tool_cond.to(patches.dtype))
            patches = patches + tool.transpose(1, 2)[..., None, None]
        tokens = patches.flatten(2).transpose(1, 2).contiguous()

        temb, timestep_proj = self._time_embedding(timestep, tokens.dtype)
        image_context = self.condition_embedder.image_embedder(encoder_hidden_states_image)
        context = torch.cat([image_context.to(tokens.dtype),
                             arm_tokens(self, arm_cond).to(tokens.dtype)], dim=1)

        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                tokens = self._gradient_checkpointing_func(block, tokens, context, timestep_proj,
                                                           rotary_emb)
            else:
                tokens = block(tokens, context, timestep_proj, rotary_emb)

        shift, scale = (self.scale_shift_table + temb.unsqueeze(1)).chunk(2, dim=1)
        tokens = (self.norm_out(tokens.float()) * (1 + scale) + shift).type_as(tokens)
        tokens = self.proj_out(tokens)
        tokens = tokens.reshape(batch_size, post_f, post_h, post_w, p_t, p_h, p_w, -1)
        output = tokens.permute(0, 7, 1, 4, 2, 5, 3, 6).flatten(6, 7).flatten(4, 5).flatten(2, 3)
        if not return_dict:
            return (output,)
        return Transformer2DModelOutput(sample=output)
