"""PyTorch eager backend (fp32 / bf16 / fp16) with the sampling levers (`levers.py`:
cache-dit step caching, FP8, compiled blocks, the attention kernel used)."""

from __future__ import annotations

from functools import partial

import torch
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.sampling import SamplingOptions

from k4d_generator.backends.levers import BlockLevers

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def cast_for_inference(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Cast to `dtype`, keeping the modules diffusers keeps in fp32 for Wan (rope, time
    embedder, modulation tables, norms) in fp32, as diffusers' own loading does. In fp32 the
    model is left untouched (its float64 RoPE tables then match the official float64 RoPE)."""
    if dtype == torch.float32:
        return model.float() if next(model.parameters()).dtype != torch.float32 else model
    keep = [k for k in (getattr(model, "_keep_in_fp32_modules", None) or [])]
    rope = getattr(model, "rope", None)
    rope_buffers = {n: b.float() for n, b in rope.named_buffers()} if rope is not None else {}
    model.to(dtype)
    for name, module in model.named_modules():
        if name and name.split(".")[-1] in keep:
            module.to(torch.float32)
    for name, param in model.named_parameters():
        if name.split(".")[-1] in keep:
            param.data = param.data.float()
    for name, buffer in rope_buffers.items():
        setattr(rope, name, buffer)
    return model


class TorchBackend:
    name = "torch"

    def __init__(self, transformer, precision: str = "fp32", device: str = "cpu"):
        if precision not in DTYPES:
            raise InvalidArgument.for_field("precision", f"must be one of {sorted(DTYPES)}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise FailedPrecondition("device cuda requested but torch sees no CUDA GPU")
        self.precision = precision
        self.dtype = DTYPES[precision]
        self.device = torch.device(device)
        self.model = cast_for_inference(transformer.to(self.device), self.dtype)
        self.levers = BlockLevers(self.model, self.device)

    def check_levers(self, options: SamplingOptions) -> None:
        self.levers.check(options)

    def prepare_levers(self, options: SamplingOptions, num_steps: int) -> None:
        """Before a generation's first step: apply its options, a fresh cache context."""
        self.levers.prepare(options, num_steps)

    def lever_report(self) -> dict:
        return self.levers.report()

    @torch.no_grad()
    def __call__(self, hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain,
                 tool_cond=None):
        tool = {} if tool_cond is None else {"tool_cond": tool_cond.to(self.device, self.dtype)}
        out = self.levers.call(partial(self.model, return_dict=False, **tool),
                               hidden_states.to(self.device, self.dtype),
                               timestep.to(self.device), image_embeds.to(self.device, self.dtype),
                               arm_cond.to(self.device, self.dtype),
                               arm_latent_gain.to(self.device))[0]
        return out.float()

    def describe(self) -> dict:
        return {"backend": self.name, "precision": self.precision, "device": str(self.device)}
