"""mp4 of the episode layouts: lossless RGB (libx264rgb, crf 0) so 8-bit pointmap codes and
black robot backgrounds survive a round trip bit-exactly. Written by k4d.video (the one mp4
module of the repo, PyAV)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from k4d.video import read_video, write_video


def write_mp4(path: str | os.PathLike, frames: np.ndarray, fps: float) -> Path:
    """frames (T, H, W, 3) uint8 -> lossless H.264 RGB mp4 (written to a temp name, then renamed)."""
    return write_video(path, frames, fps=fps, lossless=True)


def read_mp4(path: str | os.PathLike) -> np.ndarray:
    """-> (T, H, W, 3) uint8 of every frame of the first video stream."""
    return read_video(path)
