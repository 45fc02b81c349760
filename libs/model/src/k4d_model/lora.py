"""LoRA files in the diffusers format and their fusion into the transformer.

Key names are what diffusers' `WanLoraLoaderMixin.save_lora_weights` writes:
`transformer.<module path>.lora_A.weight` (r, in) and `.lora_B.weight` (out, r),
e.g. `transformer.blocks.0.attn1.to_q.lora_A.weight`. Optional adapter metadata
(safetensors header key `lora_adapter_metadata`, JSON with `transformer.r`,
`transformer.lora_alpha`) carries alpha.

Scaling follows diffusers/peft exactly: without alpha metadata alpha defaults to
the rank, so the fused weight is `W + lora_scale * B @ A`; with alpha it is
`W + lora_scale * (alpha / r) * B @ A`. The official Kinema4D inference fuses
with `lora_scale = 0.5`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from k4d.errors import InvalidArgument
from safetensors import safe_open
from safetensors.torch import save_file

LORA_FILE_NAME = "pytorch_lora_weights.safetensors"
OFFICIAL_LORA_SCALE = 0.5
_METADATA_KEY = "lora_adapter_metadata"
_PREFIX = "transformer."


@dataclass
class LoraLayer:
    """One adapted Linear: `module` is its path inside the transformer (`blocks.0.attn1.to_q`)."""

    module: str
    down: torch.Tensor  # lora_A.weight (r, in)
    up: torch.Tensor  # lora_B.weight (out, r)
    up_bias: torch.Tensor | None = None  # lora_B.bias (out,), peft `lora_bias`


@dataclass
class LoraWeights:
    layers: dict[str, LoraLayer]
    alpha: float | None  # None: no metadata, alpha = rank (diffusers default)

    def scaling(self, layer: LoraLayer, lora_scale: float) -> float:
        rank = layer.down.shape[0]
        alpha = rank if self.alpha is None else self.alpha
        return lora_scale * alpha / rank


def read_lora(path: str | Path) -> LoraWeights:
    """Read a diffusers-format LoRA safetensors file; bad keys are a clear error."""
    path = Path(path)
    layers: dict[str, dict[str, torch.Tensor]] = {}
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        for key in f.keys():
            name = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
            for suffix, slot in ((".lora_A.weight", "down"), (".lora_B.weight", "up"),
                                 (".lora_B.bias", "up_bias")):
                if name.endswith(suffix):
                    layers.setdefault(name[: -len(suffix)], {})[slot] = f.get_tensor(key)
                    break
            else:
                raise InvalidArgument.for_field("lora", f"{path.name}: unexpected key {key!r} "
                                                "(expected <module>.lora_A/lora_B.weight)")
    parsed = {}
    for module, parts in layers.items():
        if "down" not in parts or "up" not in parts:
            raise InvalidArgument.for_field("lora", f"{path.name}: {module} lacks lora_A or lora_B")
        if parts["down"].shape[0] != parts["up"].shape[1]:
            raise InvalidArgument.for_field(
                "lora", f"{path.name}: {module} rank mismatch: lora_A {tuple(parts['down'].shape)}"
                        f" vs lora_B {tuple(parts['up'].shape)}")
        parsed[module] = LoraLayer(module, parts["down"], parts["up"], parts.get("up_bias"))
    return LoraWeights(parsed, _alpha_from_metadata(metadata))


def _alpha_from_metadata(metadata: dict[str, str]) -> float | None:
    if _METADATA_KEY not in metadata:
        return None
    adapter = json.loads(metadata[_METADATA_KEY])
    alpha = adapter.get(f"{_PREFIX}lora_alpha", adapter.get("lora_alpha"))
    return None if alpha is None else float(alpha)


def write_lora(path: str | Path, layers: dict[str, tuple[torch.Tensor, torch.Tensor]],
               alpha: float | None = None, rank: int | None = None) -> None:
    """Write `{module: (lora_A (r,in), lora_B (out,r))}` in the diffusers layout; alpha, when
    given, goes into the adapter metadata the way diffusers stores it."""
    tensors = {}
    for module, (down, up) in layers.items():
        tensors[f"{_PREFIX}{module}.lora_A.weight"] = down.contiguous()
        tensors[f"{_PREFIX}{module}.lora_B.weight"] = up.contiguous()
    metadata = {"format": "pt"}
    if alpha is not None:
        metadata[_METADATA_KEY] = json.dumps({f"{_PREFIX}lora_alpha": alpha, f"{_PREFIX}r": rank},
                                             sort_keys=True)
    save_file(tensors, str(path), metadata=metadata)


@torch.no_grad()
def fuse_lora(model: torch.nn.Module, lora: LoraWeights, lora_scale: float = OFFICIAL_LORA_SCALE
              ) -> int:
    """W <- W + scaling * (B @ A) for every adapted Linear, in place; returns the layer count.

    The product is formed in float32 (as peft does for low-precision weights) and
    cast back to the weight's dtype.
    """
    modules = dict(model.named_modules())
    for name, layer in lora.layers.items():
        linear = modules.get(name)
        if not isinstance(linear, torch.nn.Linear):
            raise InvalidArgument.for_field("lora", f"LoRA targets {name!r}, which is not a Linear "
                                                    "of this transformer")
        expected = (linear.out_features, linear.in_features)
        got = (layer.up.shape[0], layer.down.shape[1])
        if got != expected:
            raise InvalidArgument.for_field("lora", f"LoRA for {name} is {got} (out, in) but the "
                                                    f"layer is {expected}")
        delta = (layer.up.float() @ layer.down.float()) * lora.scaling(layer, lora_scale)
        linear.weight.copy_((linear.weight.float() + delta.to(linear.weight.device)).to(
            linear.weight.dtype))
        if layer.up_bias is not None and linear.bias is not None:
            bias_delta = layer.up_bias.float() * lora.scaling(layer, lora_scale)
            linear.bias.copy_((linear.bias.float() + bias_delta).to(linear.bias.dtype))
    return len(lora.layers)


def official_lora_targets(num_layers: int) -> list[str]:
    """Module paths the official trainer adapts: to_q/k/v/out.0 of attn1 and attn2 per block."""
    return [f"blocks.{i}.{attn}.{proj}" for i in range(num_layers) for attn in ("attn1", "attn2")
            for proj in ("to_q", "to_k", "to_v", "to_out.0")]
