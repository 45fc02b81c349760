"""Episodes -> the recipe's clip: frame resampling, then resize + centre crop as the official
loader does (scale so the frame covers the clip, crop the centre; nearest for pointmaps and
masks, bilinear for colour).

Pure functions on numpy arrays; `read_clip` reads only the frames it keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from k4d.errors import InvalidArgument

# The arrays a training sample is built from (k4d.episodes names).
CLIP_ARRAYS = ("rgb", "pointmap", "robot_rgb", "robot_pointmap", "robot_mask")
# Read beside them when asked for (read_clip's `extra`): per-pixel object ids (0 background)
OBJECT_IDS = "object_ids"


@dataclass(frozen=True)
class ClipSpec:
    """The model's clip: frames x height x width (pixels)."""

    num_frames: int
    height: int
    width: int


def frame_indices(frames: int, num_frames: int) -> np.ndarray:
    """`num_frames` indices spread evenly over [0, frames - 1] (first and last kept)."""
    return np.round(np.linspace(0, frames - 1, num_frames)).astype(np.int64)


def scale_to_cover(height: int, width: int, clip: ClipSpec) -> float:
    """The resize factor after which an HxW frame covers the clip (then centre-cropped)."""
    return max(clip.height / height, clip.width / width)


def check_adaptable(episode_id: str, frames: int, height: int, width: int, clip: ClipSpec,
                    max_upscale: float, arrays: list[str]) -> None:
    """InvalidArgument when an episode cannot become the clip."""
    missing = [a for a in CLIP_ARRAYS if a not in arrays]
    if missing:
        raise InvalidArgument.for_field("data", f"episode {episode_id!r} lacks {missing}, which "
                                                "the training sample needs (scene pointmap as the "
                                                "target, robot arrays as the condition)")
    if frames < clip.num_frames:
        raise InvalidArgument.for_field(
            "data", f"episode {episode_id!r} has {frames} frames; the recipe's clip needs at "
                    f"least {clip.num_frames}")
    scale = scale_to_cover(height, width, clip)
    if scale > max_upscale:
        raise InvalidArgument.for_field(
            "data", f"episode {episode_id!r} is {width}x{height}; filling the {clip.width}x"
                    f"{clip.height} clip would enlarge it {scale:.2f}x, more than "
                    f"data.max_upscale {max_upscale}")


def resize_crop(video: np.ndarray, clip: ClipSpec, mode: str) -> np.ndarray:
    """(T, H, W[, C]) -> (T, clip.height, clip.width[, C]) in the input dtype.

    mode: "nearest" (pointmaps, masks) or "bilinear" (colour, antialiased when shrinking)."""
    squeeze = video.ndim == 3
    frames = video[..., None] if squeeze else video
    t, h, w, c = frames.shape
    scale = scale_to_cover(h, w, clip)
    new_h, new_w = max(clip.height, math.ceil(h * scale - 1e-6)), max(clip.width,
                                                                      math.ceil(w * scale - 1e-6))
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)
    if (new_h, new_w) != (h, w):
        dtype = x.dtype
        x = x.float()
        if mode == "nearest":
            x = F.interpolate(x, size=(new_h, new_w), mode="nearest")
        else:
            x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False,
                              antialias=scale < 1)
        if dtype == torch.uint8:
            x = x.round().clamp(0, 255)
        x = x.to(dtype)
    top, left = (new_h - clip.height) // 2, (new_w - clip.width) // 2
    x = x[:, :, top: top + clip.height, left: left + clip.width]
    out = x.permute(0, 2, 3, 1).contiguous().numpy()
    return out[..., 0] if squeeze else out


def adapt_clip(arrays: dict[str, np.ndarray], clip: ClipSpec) -> dict[str, np.ndarray]:
    """Already frame-resampled arrays -> the clip's size (rgb/robot_rgb uint8,
    pointmaps float32, robot_mask bool)."""
    out = {}
    for name, video in arrays.items():
        if name == "robot_mask":
            out[name] = resize_crop(video.astype(np.uint8), clip, "nearest").astype(bool)
        elif name == OBJECT_IDS:
            out[name] = resize_crop(video.astype(np.float32), clip, "nearest").astype(np.int16)
        elif name in ("rgb", "robot_rgb"):
            out[name] = resize_crop(video, clip, "bilinear")
        else:
            out[name] = resize_crop(video.astype(np.float32), clip, "nearest")
    if "robot_rgb" in out:  # off-robot pixels of the robot render stay black after resizing
        out["robot_rgb"] = np.where(out["robot_mask"][..., None], out["robot_rgb"],
                                    0).astype(np.uint8)
    return out


def read_clip(episode, clip: ClipSpec, extra: tuple[str, ...] = (),
              names: tuple[str, ...] = CLIP_ARRAYS) -> dict[str, np.ndarray]:
    """An opened episode (`k4d.episodes.Episode` or anything with `meta` and array access)
    -> its clip arrays, reading only the kept frames; `extra`: more arrays to read (the
    caller checks that the episode holds them); `names`: the arrays to read, all of a
    clip's by default (a caller that needs a few reads only those)."""
    indices = frame_indices(episode.meta.frames, clip.num_frames)
    arrays = {}
    for name in tuple(names) + tuple(extra):
        array = episode[name]
        if hasattr(array, "oindex"):  # zarr: fetch only the kept frames' chunks
            arrays[name] = np.asarray(array.oindex[indices])
        else:
            arrays[name] = np.asarray(array)[indices]
    out = adapt_clip(arrays, clip)
    # Pointmaps already in [-1, 1] (official Robo4D files) skip the metric normalisation.
    out["normalised"] = np.array(bool(getattr(episode, "normalised", False)))
    return out
