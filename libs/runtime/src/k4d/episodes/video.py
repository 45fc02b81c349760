"""mp4 through PyAV (the `data` extra): lossless RGB (libx264rgb, crf 0) so 8-bit pointmap
codes and black robot backgrounds survive a round trip bit-exactly."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from k4d.errors import FailedPrecondition, InvalidArgument


def _av():
    try:
        import av
    except ImportError:
        raise FailedPrecondition("mp4 I/O needs PyAV: pip install 'k4d-runtime[data]'") from None
    return av


def write_mp4(path: str | os.PathLike, frames: np.ndarray, fps: float) -> Path:
    """frames (T, H, W, 3) uint8 -> lossless H.264 RGB mp4 (written to a temp name, then renamed)."""
    av = _av()
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise InvalidArgument.for_field("frames", f"expected (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    from fractions import Fraction

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.mp4")
    try:
        with av.open(str(tmp), "w") as container:
            stream = container.add_stream("libx264rgb", rate=Fraction(fps).limit_denominator(1001))
            stream.width, stream.height = frames.shape[2], frames.shape[1]
            stream.pix_fmt = "rgb24"
            stream.options = {"crf": "0", "preset": "ultrafast"}
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_mp4(path: str | os.PathLike) -> np.ndarray:
    """-> (T, H, W, 3) uint8 of every frame of the first video stream."""
    av = _av()
    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.error.FFmpegError, OSError) as exc:
        raise InvalidArgument.for_field("path", f"cannot read video {path}: {exc}") from None
    if not frames:
        raise InvalidArgument.for_field("path", f"{path} has no video frames")
    return np.stack(frames)
