"""`FrameAutoencoder`: a per-frame 2D KL autoencoder with the interface of diffusers'
`AutoencoderKLWan`, and the helpers that treat either VAE alike.

Why a per-frame autoencoder (issue 45): the causal video VAE of the official model folds 4
frames into one latent frame and 8x8 pixels into one latent cell. At the demo clip's size
(13 x 96 x 144) that put an object of 4-6 pixels below one latent cell and capped a small
VAE's reconstruction at 20-24 dB on held-out clips. Encoding each frame on its own at 4x
keeps a latent frame per video frame, so a static scene has the same latent in every frame
(the transformer can learn the change alone), and a small 2D network trains several times
faster than the 3D one on a CPU.

Interface (what the pipeline, the trainer and the evaluator call):
  encode(video (B, C, T, H, W)) -> .latent_dist (a DiagonalGaussianDistribution over
      (B, z_dim, T, H / s, W / s))
  decode(latents (B, z_dim, T, h, w)) -> .sample (B, C, T, h * s, w * s)
  config.latents_mean / config.latents_std (per channel, set after training)
`temporal_stride(vae)` and `spatial_stride(vae)` read either VAE's strides; `load_vae`
loads either from a diffusers directory by its config's `_class_name`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.autoencoders.vae import DecoderOutput, DiagonalGaussianDistribution
from diffusers.models.modeling_outputs import AutoencoderKLOutput
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

GROUPS = 8


class _ResBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.GroupNorm(GROUPS, in_channels), nn.SiLU(),
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            nn.GroupNorm(GROUPS, out_channels), nn.SiLU(),
            nn.Conv2d(out_channels, out_channels, 3, padding=1))
        self.skip = (nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels
                     else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.skip(x) + self.body(x)


def _encoder(in_channels: int, z_dim: int, channels: list[int], num_res_blocks: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(in_channels, channels[0], 3, padding=1)]
    width = channels[0]
    for level, out in enumerate(channels):
        for _ in range(num_res_blocks):
            layers.append(_ResBlock(width, out))
            width = out
        if level < len(channels) - 1:
            layers.append(nn.Conv2d(width, width, 3, stride=2, padding=1))
    layers += [_ResBlock(width, width), nn.GroupNorm(GROUPS, width), nn.SiLU(),
               nn.Conv2d(width, 2 * z_dim, 3, padding=1)]
    return nn.Sequential(*layers)


def _decoder(out_channels: int, z_dim: int, channels: list[int], num_res_blocks: int) -> nn.Module:
    width = channels[-1]
    layers: list[nn.Module] = [nn.Conv2d(z_dim, width, 3, padding=1), _ResBlock(width, width)]
    for level, out in reversed(list(enumerate(channels))):
        for _ in range(num_res_blocks + 1):
            layers.append(_ResBlock(width, out))
            width = out
        if level > 0:
            layers += [nn.Upsample(scale_factor=2, mode="nearest"),
                       nn.Conv2d(width, width, 3, padding=1)]
    layers += [nn.GroupNorm(GROUPS, width), nn.SiLU(), nn.Conv2d(width, out_channels, 3, padding=1)]
    return nn.Sequential(*layers)


class FrameAutoencoder(ModelMixin, ConfigMixin):
    """Per-frame 2D KL autoencoder: `channels` per level (len - 1 downsamplings of 2x)."""

    @register_to_config
    def __init__(self, in_channels: int = 3, z_dim: int = 16,
                 channels: tuple[int, ...] = (32, 64, 128), num_res_blocks: int = 1,
                 latents_mean: list[float] | None = None,
                 latents_std: list[float] | None = None):
        super().__init__()
        channels = list(channels)
        if any(c % GROUPS for c in channels):
            raise ValueError(f"channels {channels} must be multiples of {GROUPS}")
        self.encoder = _encoder(in_channels, z_dim, channels, num_res_blocks)
        self.decoder = _decoder(in_channels, z_dim, channels, num_res_blocks)
        if latents_mean is None:
            self.register_to_config(latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim)

    @staticmethod
    def _frames(video: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = video.shape
        return video.transpose(1, 2).reshape(b * t, c, h, w)

    @staticmethod
    def _video(frames: torch.Tensor, batch: int) -> torch.Tensor:
        n, c, h, w = frames.shape
        return frames.reshape(batch, n // batch, c, h, w).transpose(1, 2)

    def encode(self, video: torch.Tensor, return_dict: bool = True):
        """(B, C, T, H, W) -> latent distribution over (B, z_dim, T, H / s, W / s)."""
        moments = self._video(self.encoder(self._frames(video)), video.shape[0])
        dist = DiagonalGaussianDistribution(moments)
        return AutoencoderKLOutput(latent_dist=dist) if return_dict else (dist,)

    def decode(self, latents: torch.Tensor, return_dict: bool = True):
        """(B, z_dim, T, h, w) -> (B, C, T, h * s, w * s), unclamped."""
        sample = self._video(self.decoder(self._frames(latents)), latents.shape[0])
        return DecoderOutput(sample=sample) if return_dict else (sample,)


def vae_strides(vae_config) -> tuple[int, int]:
    """(temporal, spatial) strides of either VAE's config (a dict, a FrozenDict or a named
    size's `vae` kwargs): video frames per latent frame after the first, pixels per latent
    cell along each axis. Wan: (2 per temporal down-sampling, 2 per level); ours: (1, 2 per
    level)."""
    channels = _field(vae_config, "channels")
    if channels is not None:
        return 1, 2 ** (len(channels) - 1)
    return (2 ** sum(_field(vae_config, "temperal_downsample")),
            2 ** (len(_field(vae_config, "dim_mult")) - 1))


def temporal_stride(vae) -> int:
    return vae_strides(vae.config)[0]


def spatial_stride(vae) -> int:
    return vae_strides(vae.config)[1]


def widest_channels(vae_config) -> int:
    """The widest stage of either VAE's decoder (the memory estimate's activations)."""
    channels = _field(vae_config, "channels")
    if channels is not None:
        return max(channels)
    return _field(vae_config, "base_dim") * max(_field(vae_config, "dim_mult"))


def _field(config, key: str):
    """A config's field whether it is a mapping (a dict, diffusers' FrozenDict) or has
    attributes; None when absent."""
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def load_vae(directory: str | Path, **kwargs):
    """The VAE saved in a diffusers directory: FrameAutoencoder or AutoencoderKLWan, by the
    `_class_name` of its config.json."""
    config = json.loads((Path(directory) / "config.json").read_text())
    if config.get("_class_name") == FrameAutoencoder.__name__:
        return FrameAutoencoder.from_pretrained(str(directory), **kwargs).eval()
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan.from_pretrained(str(directory), **kwargs).eval()


def build_vae(config: dict):
    """A fresh VAE from a named size's `vae` kwargs: `{"class": "FrameAutoencoder", ...}`
    builds ours, anything else diffusers' AutoencoderKLWan."""
    kwargs = dict(config)
    if kwargs.pop("class", None) == FrameAutoencoder.__name__:
        return FrameAutoencoder(**kwargs)
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(**kwargs)
