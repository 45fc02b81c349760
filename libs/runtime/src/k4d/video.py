"""mp4 files, one implementation for the repo (PyAV; ADR 010).

    write_video(path, frames, fps, lossless=True)
        lossless=True: H.264 RGB (libx264rgb, crf 0): every uint8 value survives a round
        trip, so 8-bit pointmap codes and black robot backgrounds decode bit-exactly
        (larger files, fewer players).
        lossless=False: H.264 yuv420p crf 18, plays everywhere; lossy (chroma subsampling,
        quantisation), so never decode data out of it. Odd sizes are padded by one edge
        pixel (yuv420p needs even sizes).
    read_video(path) -> (T, H, W, 3) uint8

Files are written to a temp name in the same folder and renamed, so a reader never sees
half a file. PyAV comes with the runtime's `data` extra (or `pip install av`).
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np

from k4d.errors import FailedPrecondition, InvalidArgument

LOSSLESS_CODEC = "libx264rgb crf 0 (lossless)"
LOSSY_CODEC = "libx264 yuv420p crf 18"


def _av():
    try:
        import av
    except ImportError:
        raise FailedPrecondition("mp4 I/O needs PyAV: pip install av (or 'k4d-runtime[data]')") from None
    return av


def _check_frames(frames) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or not len(frames):
        raise InvalidArgument.for_field(
            "frames", f"expected (T>0, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    return frames


def _check_fps(fps) -> Fraction:
    try:
        value = float(fps)
    except (TypeError, ValueError):
        raise InvalidArgument.for_field("fps", f"expected a number, got {fps!r}") from None
    if not np.isfinite(value) or not 0 < value <= 1000:
        raise InvalidArgument.for_field("fps", f"must be in (0, 1000], got {fps}")
    return Fraction(value).limit_denominator(1001)


def write_video(path: str | os.PathLike, frames, fps: float = 24.0, *,
                lossless: bool = True) -> Path:
    """(T, H, W, 3) uint8 -> mp4 at `path` (parent folders created); returns the path."""
    av = _av()
    frames = _check_frames(frames)
    rate = _check_fps(fps)
    if lossless:
        codec, pix_fmt, options = "libx264rgb", "rgb24", {"crf": "0", "preset": "ultrafast"}
    else:
        codec, pix_fmt, options = "libx264", "yuv420p", {"crf": "18", "preset": "veryfast"}
        pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
        if pad_h or pad_w:
            frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.mp4")
    try:
        with av.open(str(tmp), "w") as container:
            stream = container.add_stream(codec, rate=rate)
            stream.width, stream.height = frames.shape[2], frames.shape[1]
            stream.pix_fmt = pix_fmt
            stream.options = options
            for frame in frames:
                image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
                if pix_fmt != "rgb24":
                    image = image.reformat(format=pix_fmt)
                for packet in stream.encode(image):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_video(path: str | os.PathLike) -> np.ndarray:
    """(T, H, W, 3) uint8: every frame of the file's first video stream."""
    av = _av()
    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.error.FFmpegError, OSError) as exc:
        raise InvalidArgument.for_field("path", f"cannot read video {path}: {exc}") from None
    if not frames:
        raise InvalidArgument.for_field("path", f"{path} has no video frames")
    return np.stack(frames)
