"""Files of a generation in an output directory (same names as `k4d simulate` writes):

    rgb.mp4                 generated RGB video (H.264, fps from the model)
    pointmap.npz            pointmap (T, H, W, 3) float32 camera frame (metres),
                            mask (T, H, W) bool (every generated pixel is valid), rgb (T, H, W, 3)
    pointmap_k4d.mp4/.json  the Kinema4D 8-bit pointmap video (lossless RGB H.264) + per-frame
                            centre/scale; written with the projection package's codec
                            (`k4d_projection.codecs`) when it is installed
    generation.json         the result's metadata (model, backend, seed, guidance, timings)
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
from k4d.tensor_io import save_npz

RGB_VIDEO = "rgb.mp4"
POINTMAP_NPZ = "pointmap.npz"
POINTMAP_VIDEO = "pointmap_k4d.mp4"
POINTMAP_VIDEO_META = "pointmap_k4d.json"
METADATA_JSON = "generation.json"


def write_video(path: Path, frames: np.ndarray, fps: int) -> Path:
    """(T, H, W, 3) uint8 -> H.264 mp4 (even sizes padded by the encoder's block rules)."""
    import imageio.v2 as imageio

    with imageio.get_writer(str(path), fps=fps, codec="libx264", macro_block_size=1,
                            ffmpeg_log_level="error") as writer:
        for frame in frames:
            writer.append_data(frame)
    return path


def _pointmap_codec():
    """The projection package's Kinema4D 8-bit codec, if installed (optional dependency)."""
    try:
        return importlib.import_module("k4d_projection.codecs")
    except ImportError:
        return None


def write_result(result, out_dir: str | Path, fps: int = 24) -> dict[str, str]:
    """Write a `GenerationResult`; returns {kind: path} of the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"rgb_video": str(write_video(out / RGB_VIDEO, result.rgb, fps))}
    mask = np.ones(result.pointmap.shape[:3], dtype=bool)
    save_npz(out / POINTMAP_NPZ, {"pointmap": result.pointmap.astype(np.float32), "mask": mask,
                                  "rgb": result.rgb})
    written["pointmap_npz"] = str(out / POINTMAP_NPZ)
    codec = _pointmap_codec()
    if codec is not None:
        encoded = codec.encode_8bit(result.pointmap, mask)
        codec.write_video(out / POINTMAP_VIDEO, encoded.values, fps=fps)
        (out / POINTMAP_VIDEO_META).write_text(json.dumps({
            "format": codec.FORMAT_8BIT, "frame": "first_frame_camera_opencv", "units": "metres",
            "decode": "p = (v / 127.5 - 1) * scale[t] + centre[t]", "fps": fps,
            "centre": encoded.centre.tolist(), "scale": encoded.scale.tolist()}, indent=1))
        written["pointmap_video"] = str(out / POINTMAP_VIDEO)
        written["pointmap_video_meta"] = str(out / POINTMAP_VIDEO_META)
    else:
        result.metadata["pointmap_video"] = ("not written: k4d_projection.codecs (the Kinema4D "
                                             "8-bit codec) is not installed")
    (out / METADATA_JSON).write_text(json.dumps(result.metadata, indent=2, default=_json_default))
    written["metadata"] = str(out / METADATA_JSON)
    return written


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)
