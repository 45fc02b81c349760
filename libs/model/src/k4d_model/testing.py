"""Test support (never imported by serving code): the seeded tiny models (2 layers, 2 heads,
5 x 32 x 48 clips) of both variants, built once per process."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch

from k4d_model.results import RobotCondition


def tiny_model_factory() -> Callable[[str], tuple]:
    """-> make(variant="act") giving (components, lora) deep copies of the tiny model built
    with seed 0 (LoRA unfused): tests may mutate what they get."""
    from k4d_model.checkpoints import build_components
    from k4d_model.model.configs import get_model_config

    built: dict[str, tuple] = {}

    def make(variant: str = "act"):
        if variant not in built:
            built[variant] = build_components(get_model_config("tiny", variant), seed=0,
                                              lora_fused=False)
        components, lora = built[variant]
        return copy.deepcopy(components), copy.deepcopy(lora)

    return make


def tiny_per_frame_components(latent_target: str | None = None):
    """The tiny transformer on a per-frame VAE (strides 1 x 4, 33 input channels), seeded;
    with `latent_target` ("change", "tracks") recorded in its `extra`."""
    import dataclasses

    from k4d_model.checkpoints import build_components
    from k4d_model.model.configs import _transformer_kwargs, get_model_config

    transformer = _transformer_kwargs(heads=2, head_dim=16, layers=2, ffn=64, text_dim=16,
                                      image_dim=32, freq_dim=32, num_frames=5, height=32,
                                      width=48, arm_patch_size=(1, 2, 2), num_image_tokens=17,
                                      rope_max_seq_len=64, strides=(1, 4))
    config = dataclasses.replace(get_model_config("tiny"), transformer=transformer,
                                 vae={"class": "FrameAutoencoder", "z_dim": 16,
                                      "channels": [8, 16, 16], "num_res_blocks": 1})
    components, _ = build_components(config, seed=0)
    if latent_target:
        components.info.extra["latent_target"] = latent_target
    return components


def sliding_box_robot(num_frames=5, height=32, width=48, seed=0):
    """A box sliding right over a black frame; pointmap ~0.8 m in front of the camera."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((num_frames, height, width), bool)
    for t in range(num_frames):
        mask[t, 8:20, 6 + 3 * t: 20 + 3 * t] = True
    rgb = np.where(mask[..., None], rng.integers(60, 255, (num_frames, height, width, 3)), 0)
    points = np.where(mask[..., None], rng.uniform(0.7, 0.9, (num_frames, height, width, 3)), 0)
    image = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    return image, RobotCondition(rgb.astype(np.uint8), points.astype(np.float32), mask)


class CallableDenoiser:
    """The transformer's forward, as a plain callable: what a backend has to be."""

    def __init__(self, transformer):
        self.model = transformer
        self.calls = 0

    @torch.no_grad()
    def __call__(self, hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain,
                 tool_cond=None):
        self.calls += 1
        return self.model(hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain,
                          return_dict=False, tool_cond=tool_cond)[0].float()

    def describe(self) -> dict:
        return {"backend": "callable"}
