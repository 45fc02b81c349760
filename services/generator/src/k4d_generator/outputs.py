"""Files of a generation in an output directory (same names as `k4d simulate` writes):

    rgb.mp4                 generated RGB video (H.264, fps from the model)
    pointmap.npz            pointmap (T, H, W, 3) float32 camera frame (metres),
                            mask (T, H, W) bool (every generated pixel is valid), rgb (T, H, W, 3)
    pointmap_k4d.mp4/.json  the Kinema4D 8-bit pointmap video (lossless RGB H.264) + per-frame
                            centre/scale (k4d.pointmap_video: the one writer and schema)
    generation.json         the result's metadata (model, backend, seed, guidance, timings)
    rollout.rrd             Rerun recording (docs/viewing.md) when rerun-sdk is installed:
                            the generated RGB + pointmap, the robot condition, and the robot's
                            joints and link frames when the robot NPZ carries them
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from k4d.pointmap_video import write_pointmap_video
from k4d.tensor_io import save_npz
from k4d.video import write_video as _write_mp4

RGB_VIDEO = "rgb.mp4"
POINTMAP_NPZ = "pointmap.npz"
METADATA_JSON = "generation.json"

log = logging.getLogger("k4d.generate")


def write_video(path: Path, frames: np.ndarray, fps: int) -> Path:
    """(T, H, W, 3) uint8 -> H.264 yuv420p mp4 for viewing (k4d.video, lossy)."""
    return _write_mp4(path, frames, fps=fps, lossless=False)


def write_result(result, out_dir: str | Path, fps: int = 24, *, camera_path=None,
                 robot_path=None) -> dict[str, str]:
    """Write a `GenerationResult`; returns {kind: path} of the files written. With the
    camera JSON and robot NPZ paths, also rollout.rrd (when rerun-sdk is installed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"rgb_video": str(write_video(out / RGB_VIDEO, result.rgb, fps))}
    mask = np.ones(result.pointmap.shape[:3], dtype=bool)
    save_npz(out / POINTMAP_NPZ, {"pointmap": result.pointmap.astype(np.float32), "mask": mask,
                                  "rgb": result.rgb})
    written["pointmap_npz"] = str(out / POINTMAP_NPZ)
    video, meta = write_pointmap_video(out, result.pointmap, mask, fps,
                                       mask_source="every generated pixel is valid")
    written["pointmap_video"] = str(video)
    written["pointmap_video_meta"] = str(meta)
    (out / METADATA_JSON).write_text(json.dumps(result.metadata, indent=2, default=_json_default))
    written["metadata"] = str(out / METADATA_JSON)
    if camera_path is not None and robot_path is not None:
        from k4d.recording import RECORDING_FILE, is_rerun_available

        if is_rerun_available():
            written["recording"] = str(write_recording(out / RECORDING_FILE, result, camera_path,
                                                       robot_path, fps))
        else:
            log.warning("%s not written: rerun-sdk is not installed (pip install "
                        "'k4d-runtime[viz]')", RECORDING_FILE)
    return written


def write_recording(path: Path, result, camera_path, robot_path, fps: float) -> Path:
    """rollout.rrd of a generation: the generated world, the robot condition, and the
    robot's joints and link frames when the robot NPZ has them (a `k4d project` or
    `k4d simulate` robot.npz does). A camera JSON without extrinsics puts the camera at
    the world origin."""
    from k4d.camera import Camera
    from k4d.recording import write_episode_recording
    from k4d.tensor_io import load_npz

    T, H, W = result.rgb.shape[:3]
    doc = dict(json.loads(Path(camera_path).read_text()), width=W, height=H)
    doc.setdefault("T_cam_from_world", np.eye(4).tolist())
    camera = Camera.from_dict(doc, field_prefix="camera")
    robot = load_npz(robot_path)
    kinematics = {}
    if {"joints", "joint_names"} <= set(robot) and len(robot["joints"]) == T:
        kinematics.update(joints=robot["joints"], joint_names=[str(n) for n in robot["joint_names"]])
    if {"poses", "link_names"} <= set(robot) and len(robot["poses"]) == T:
        kinematics.update(link_poses=robot["poses"],
                          link_names=[str(n) for n in robot["link_names"]])
    meta = result.metadata
    static = meta.get("generated") is False
    return write_episode_recording(
        path, rgb=result.rgb, pointmap=result.pointmap, camera=camera,
        robot_pointmap=robot["pointmap"], robot_mask=robot["mask"].astype(bool), fps=fps,
        title="Kinema4D generation" + (" (STATIC-WORLD, not generated)" if static else ""),
        notice=str(meta.get("note", "")) if static else "",
        info={k: meta[k] for k in ("generator", "model", "seed", "backend") if k in meta},
        **kinematics)


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)
