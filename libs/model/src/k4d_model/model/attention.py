"""Cross-attention processor for Kinema4D: the context is [CLIP image tokens | arm tokens].

diffusers' `WanAttnProcessor` assumes the context is [image tokens | 512 text
tokens] and splits at `len - 512`. Kinema4D replaces the text with arm tokens
(624 for `act`, 312 for `pmcond` at 480x720), so the split point must come from
the model: the first `num_image_tokens` context tokens (257 for CLIP ViT-H/14)
go through the added image K/V projections, the rest through to_k / to_v, and
the two attention outputs are summed before to_out, as in the official model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, N, heads*D) -> (B, heads, N, D)."""
    return x.unflatten(2, (heads, -1)).transpose(1, 2)


class Kinema4DCrossAttnProcessor:
    """Processor for `WanAttention` cross-attention (attn2) of every block."""

    def __init__(self, num_image_tokens: int):
        self.num_image_tokens = num_image_tokens

    def __call__(self, attn, hidden_states: torch.Tensor,
                 encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 rotary_emb=None) -> torch.Tensor:
        """hidden_states: (B, N, dim) video tokens; encoder_hidden_states: (B, 257 + A, dim)."""
        image_context = encoder_hidden_states[:, : self.num_image_tokens]
        arm_context = encoder_hidden_states[:, self.num_image_tokens:]

        query = _heads(attn.norm_q(attn.to_q(hidden_states)), attn.heads)
        key = _heads(attn.norm_k(attn.to_k(arm_context)), attn.heads)
        value = _heads(attn.to_v(arm_context), attn.heads)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)

        key_img = _heads(attn.norm_added_k(attn.add_k_proj(image_context)), attn.heads)
        value_img = _heads(attn.add_v_proj(image_context), attn.heads)
        out_img = F.scaled_dot_product_attention(query, key_img, value_img)

        out = out.transpose(1, 2).flatten(2, 3).type_as(query)
        out = out + out_img.transpose(1, 2).flatten(2, 3).type_as(query)
        out = attn.to_out[0](out)
        return attn.to_out[1](out)
