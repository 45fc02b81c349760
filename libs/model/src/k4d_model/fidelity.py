"""The array work of the output options (`k4d.generation.FidelityOptions`): the given
first latent through sampling, the change mask, relative composition. The options and their
meaning are documented in `k4d.generation` (plain Python: the trainer's control plane
validates recipes with it and has no torch)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from k4d.generation import FidelityOptions


def anchor_first_latent(latents: torch.Tensor, clean_first: torch.Tensor, noise: torch.Tensor,
                        sigma: float) -> torch.Tensor:
    """Latents with the RGB half of latent frame 0 replaced by the clean first-frame latent
    noised to `sigma` (flow matching: x_sigma = (1 - sigma) x_0 + sigma noise)."""
    half = latents.shape[-1] // 2
    out = latents.clone()
    out[:, :, :1, :, :half] = (1.0 - sigma) * clean_first + sigma * noise
    return out


def change_mask(rgb_delta: np.ndarray, depth_delta_m: np.ndarray | None,
                robot_mask: np.ndarray, options: FidelityOptions) -> np.ndarray:
    """(T, H, W) bool: where the output shows generated change rather than the input.

    rgb_delta: (T, H, W, 3) decoded change in levels (0-255 scale); depth_delta_m: (T, H, W)
    or None; robot_mask: (T, H, W) the robot condition (its pixels now and in frame 0 are
    always generated: the robot moves there, or uncovers what it hid)."""
    changed = np.abs(rgb_delta).max(axis=-1) > options.change_threshold
    if depth_delta_m is not None and options.change_depth_m > 0:  # 0: RGB change only
        changed |= np.abs(depth_delta_m) > options.change_depth_m
    if options.change_near_robot_px > 0:
        swept = np.logical_or.accumulate(robot_mask, axis=0)  # where the robot has been
        changed &= _grow(swept, options.change_near_robot_px)
    changed |= robot_mask | robot_mask[:1]
    if options.change_dilate > 0:
        changed = _grow(changed, options.change_dilate)
    changed[0] = False  # frame 0 is the observation
    return changed


def _grow(mask: np.ndarray, pixels: int) -> np.ndarray:
    """(T, H, W) bool grown by `pixels` in every direction (a square window), per frame."""
    k = 2 * pixels + 1
    grown = F.max_pool2d(torch.from_numpy(mask.astype(np.float32))[:, None], k, stride=1,
                         padding=pixels)
    return grown[:, 0].numpy() > 0.5


def compose_over_input(first: np.ndarray, generated: np.ndarray, mask: np.ndarray
                       ) -> np.ndarray:
    """Generated pixels inside `mask` (T, H, W), the input `first` (H, W, C) elsewhere."""
    return np.where(mask[..., None], generated, first[None])


def compose_relative(first: np.ndarray, generated: np.ndarray, reference: np.ndarray,
                     mask: np.ndarray | None) -> np.ndarray:
    """x_t = x_0 + (generated_t - reference_t), and x_0 itself outside `mask` (T, H, W).

    first (H, W, C); generated, reference (T, H, W, C) in the units of `first`."""
    out = first[None] + (generated - reference)
    if mask is not None:
        out = np.where(mask[..., None], out, first[None])
    return out
