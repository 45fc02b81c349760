"""Pointmap codecs: the math lives in the runtime (`k4d.pointmap_codec`, shared with the
simulator's outputs and the Robo4D-200k layout); this module adds the files (safetensors;
mp4 through k4d.video) the projection CLI and service write.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from k4d.errors import InvalidArgument
from k4d.pointmap_codec import (
    CLIP_PERCENTILES,
    FORMAT_8BIT,
    FORMAT_LOSSLESS,
    FORMAT_VERSION,
    EncodedPointmap,
)
from k4d.video import write_video as _write_mp4


# ---- files ------------------------------------------------------------------------
def save(encoded: EncodedPointmap, path: str | Path) -> None:
    """safetensors with tensors values/centre/scale/mask/T_cam0_from_cam and metadata
    naming the form, so `load` restores it exactly."""
    from safetensors.numpy import save_file

    tensors = {"values": np.ascontiguousarray(encoded.values),
               "centre": encoded.centre.astype(np.float64),
               "scale": encoded.scale.astype(np.float64),
               "mask": encoded.mask.astype(np.uint8),
               "T_cam0_from_cam": encoded.T_cam0_from_cam.astype(np.float64)}
    metadata = {"format": FORMAT_8BIT if encoded.is_8bit else FORMAT_LOSSLESS,
                "version": FORMAT_VERSION, "frame": "first_frame_camera_opencv",
                "clip_percentiles": ",".join(str(p) for p in CLIP_PERCENTILES),
                "dtype": str(encoded.values.dtype), "units": "metres"}
    save_file(tensors, str(path), metadata=metadata)


def load(path: str | Path) -> EncodedPointmap:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("format") not in (FORMAT_8BIT, FORMAT_LOSSLESS):
                raise InvalidArgument.for_field("path", f"{path} is not a k4d pointmap file")
            t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open API
    except InvalidArgument:
        raise
    except Exception as exc:  # safetensors raises its own error types for broken files
        raise InvalidArgument.for_field("path", f"cannot read {path}: {exc}") from None
    return EncodedPointmap(t["values"], t["centre"], t["scale"], t["mask"].astype(bool),
                           t["T_cam0_from_cam"])


def write_video(path: str | Path, frames: np.ndarray, fps: int = 24,
                lossless: bool = True) -> None:
    """(T, H, W, 3) uint8 -> mp4 (k4d.video). lossless=True: libx264rgb crf 0 (RGB kept
    bit-exact). lossless=False: libx264 yuv420p crf 18, lossy: never decode metric points
    out of it. The folder must exist (a CLI typo is an error, not a new folder)."""
    if not Path(path).parent.is_dir():
        raise FileNotFoundError(f"No such file or directory: {Path(path).parent}")
    _write_mp4(path, frames, fps=fps, lossless=lossless)
