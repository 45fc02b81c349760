"""The Kinema4D 8-bit pointmap video and its `pointmap_k4d.json`: one writer, one schema,
used by `k4d simulate` (embedded runner), `k4d generate` and the generator worker.

Files in an output directory:

    pointmap_k4d.mp4   the 8-bit codes (k4d.pointmap_codec.encode_8bit) as lossless RGB H.264
                       (libx264rgb crf 0; k4d.video), so the codes decode bit-exactly
    pointmap_k4d.json  schema version 1:
        format            "k4d.pointmap.u8"
        version           "1" (k4d.pointmap_codec.FORMAT_VERSION)
        video             "pointmap_k4d.mp4"
        video_codec       "libx264rgb crf 0 (lossless)"
        frame             "first_frame_camera_opencv"
        units             "metres"
        fps               frames per second of the video
        clip_percentiles  [2.0, 98.0]: the per-frame, per-axis clip box
        decode            the formula, p_cam0 = (code / 127.5 - 1) * scale[t] + centre[t]
        centre            (T, 3) metres, first-frame camera coordinates
        scale             (T,) metres
        T_cam0_from_cam   (T, 4, 4): frame t's camera -> the first frame's (identity for a
                          static camera)

Pixels off the mask are stored as code 0 and carry no point; the mask is not in the video
(the writer's caller keeps it, e.g. `pointmap.npz`), `read_pointmap_video` recovers it
from the codes (k4d.pointmap_codec.mask_from_values), which is exact unless a masked
point encodes to (0, 0, 0).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from k4d.errors import InvalidArgument
from k4d.pointmap_codec import (
    CLIP_PERCENTILES,
    FORMAT_8BIT,
    FORMAT_VERSION,
    EncodedPointmap,
    encode_8bit,
    mask_from_values,
)
from k4d.video import LOSSLESS_CODEC, read_video, write_video

POINTMAP_VIDEO = "pointmap_k4d.mp4"
POINTMAP_VIDEO_META = "pointmap_k4d.json"
METADATA_KEYS = ("format", "version", "video", "video_codec", "frame", "units", "fps",
                 "clip_percentiles", "decode", "centre", "scale", "T_cam0_from_cam")


def pointmap_video_metadata(encoded: EncodedPointmap, fps: float,
                            mask_source: str = "") -> dict:
    """The `pointmap_k4d.json` document of an 8-bit encoding (keys: METADATA_KEYS)."""
    off_mask = "pixels off the mask carry no point (code 0)"
    if mask_source:
        off_mask = f"pixels off the mask ({mask_source}) carry no point (code 0)"
    return {
        "format": FORMAT_8BIT, "version": FORMAT_VERSION,
        "video": POINTMAP_VIDEO, "video_codec": LOSSLESS_CODEC,
        "frame": "first_frame_camera_opencv", "units": "metres", "fps": float(fps),
        "clip_percentiles": list(CLIP_PERCENTILES),
        "decode": f"p_cam0 = (code / 127.5 - 1) * scale[t] + centre[t]; {off_mask}",
        "centre": encoded.centre.tolist(), "scale": encoded.scale.tolist(),
        "T_cam0_from_cam": encoded.T_cam0_from_cam.tolist(),
    }


def write_pointmap_video(out_dir: str | os.PathLike, pointmap, mask, fps: float, *,
                         T_world_from_cam=None, mask_source: str = "") -> tuple[Path, Path]:
    """Metric camera-frame pointmap (T, H, W, 3) + mask (T, H, W) -> pointmap_k4d.mp4 and
    pointmap_k4d.json in `out_dir`; returns their paths. `T_world_from_cam` (T, 4, 4) for a
    moving camera (None = static). `mask_source` names where the exact mask is kept."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    encoded = encode_8bit(pointmap, mask, T_world_from_cam)
    video = write_video(out / POINTMAP_VIDEO, encoded.values, fps=fps, lossless=True)
    meta = out / POINTMAP_VIDEO_META
    tmp = meta.with_name(f".{meta.name}.tmp")
    tmp.write_text(json.dumps(pointmap_video_metadata(encoded, fps, mask_source), indent=1) + "\n")
    os.replace(tmp, meta)
    return video, meta


def read_pointmap_video(out_dir: str | os.PathLike) -> EncodedPointmap:
    """The encoding written by `write_pointmap_video` (decode it with
    k4d.pointmap_codec.decode); the mask comes from the codes."""
    out = Path(out_dir)
    try:
        meta = json.loads((out / POINTMAP_VIDEO_META).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidArgument.for_field("path", f"cannot read {out / POINTMAP_VIDEO_META}: {exc}") from None
    if meta.get("format") != FORMAT_8BIT or str(meta.get("version")) != FORMAT_VERSION:
        raise InvalidArgument.for_field(
            "path", f"{out / POINTMAP_VIDEO_META} is not a version {FORMAT_VERSION} "
                    f"{FORMAT_8BIT} document")
    values = read_video(out / meta.get("video", POINTMAP_VIDEO))
    centre = np.asarray(meta["centre"], np.float64)
    scale = np.asarray(meta["scale"], np.float64)
    T_cam0_from_cam = np.asarray(meta["T_cam0_from_cam"], np.float64)
    if not (len(values) == len(centre) == len(scale) == len(T_cam0_from_cam)):
        raise InvalidArgument.for_field("path", f"{out}: video frames and metadata disagree")
    return EncodedPointmap(values, centre, scale, mask_from_values(values), T_cam0_from_cam)
