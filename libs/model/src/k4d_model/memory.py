"""A memory estimate made before sampling, so a request that cannot fit is refused with
RESOURCE_EXHAUSTED instead of crashing the process with an out-of-memory error.

The weights are already resident when a request arrives, so the estimate covers what
sampling adds: the denoiser's activations (inference keeps one block's worth alive,
attention through fused kernels, no N x N matrix) and the VAE's decode workspace.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from k4d.errors import ResourceExhausted

from k4d_model.frame_vae import vae_strides, widest_channels
from k4d_model.model.configs import latent_shape

_GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    denoiser_bytes: int
    vae_bytes: int
    available_bytes: int
    device: str

    @property
    def required_bytes(self) -> int:
        # 20% slack for allocator fragmentation and temporary copies.
        return int(1.2 * (self.denoiser_bytes + self.vae_bytes))

    def to_dict(self) -> dict:
        return {"required_gib": round(self.required_bytes / _GIB, 3),
                "available_gib": round(self.available_bytes / _GIB, 3), "device": self.device}


def available_bytes(device: str) -> int:
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def estimate(transformer_config, vae_config, num_frames: int, height: int, width: int,
             batch: int, bytes_per_element: int, device: str,
             available: int | None = None) -> MemoryEstimate:
    """Estimate sampling memory for one request; `batch` is 2 for batched two-pass guidance."""
    lf, lh, lw = latent_shape(num_frames, height, width, vae_strides(vae_config))
    lw *= 2  # RGB and pointmap side by side
    pt, ph, pw = transformer_config.patch_size
    tokens = (lf // pt) * (lh // ph) * (lw // pw)
    dim = transformer_config.num_attention_heads * transformer_config.attention_head_dim
    # residual stream + normed copy + q, k, v, attention out + the FFN hidden layer.
    per_token = 7 * dim + transformer_config.ffn_dim
    denoiser = batch * tokens * per_token * bytes_per_element
    # VAE decode: the widest decoder stage at full resolution over a causal chunk of 4
    # frames, with its caches and the residual branch (x8, calibrated on the `small` config
    # where sampling grew RSS by ~190 MiB), plus the decoded clip itself, in float32; and a
    # fixed 256 MiB for allocator and kernel workspaces.
    widest = widest_channels(vae_config)
    pixels = height * 2 * width
    vae = 8 * (widest * pixels * 4 * 3) + 4 * 3 * num_frames * pixels + 256 * 2**20
    return MemoryEstimate(int(denoiser), int(vae),
                          available if available is not None else available_bytes(device), device)


def ensure_fits(est: MemoryEstimate) -> None:
    if est.required_bytes > est.available_bytes:
        raise ResourceExhausted(
            f"sampling needs about {est.required_bytes / _GIB:.2f} GiB on {est.device} but only "
            f"{est.available_bytes / _GIB:.2f} GiB is free; lower the resolution or frames, "
            "use one-pass guidance, or a larger device")
