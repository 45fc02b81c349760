"""The evaluation's Rerun recording: ground truth beside prediction (RGB, pointmaps, robot
mask, the camera of the ground truth) with the per-frame whole-frame metrics as plots,
written by `k4d.recording.write_comparison_recording` (docs/viewing.md).

Layout (docs/evaluation.md): `k4d eval pair ... --camera CAM.json` writes
OUT/comparison.rrd; `k4d eval --pred --gt` and `k4d eval run` write one recording per
episode, OUT/comparison/<episode_id>.rrd. `k4d view OUT` opens them all.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from k4d.camera import Camera, cameras_from_json
from k4d.errors import FailedPrecondition, InvalidArgument

from k4d_eval.clip import Clip
from k4d_eval.evaluate import EpisodeResult, metric_values

COMPARISON_RRD = "comparison.rrd"
COMPARISONS_DIR = "comparison"


def unavailable_reason() -> str | None:
    """Why no recording can be written (rerun-sdk, the `k4d-runtime[viz]` extra, missing),
    or None when it can."""
    from k4d.recording import require_rerun

    try:
        require_rerun()
    except FailedPrecondition as exc:
        return str(exc)
    return None


def load_camera(path: Path, frames: int, height: int, width: int) -> Camera | list[Camera]:
    """`--camera CAM.json`: the DESIGN.md camera object (or a per-frame list), parsed by
    `Camera.from_dict` and checked against the clips before any evaluation runs."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InvalidArgument.for_field("camera", f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidArgument.for_field("camera", f"{path} is not JSON: {exc}") from None
    camera = cameras_from_json(doc)
    if isinstance(camera, list) and len(camera) != frames:
        raise InvalidArgument.for_field("camera", f"a per-frame camera list needs {frames} "
                                                  f"entries, got {len(camera)}")
    for cam in camera if isinstance(camera, list) else [camera]:
        if (cam.width, cam.height) != (width, height):
            raise InvalidArgument.for_field(
                "camera.width", f"camera is {cam.width}x{cam.height}, the frames {width}x{height}")
    return camera


def per_frame_metrics(result: EpisodeResult, psnr_max_db: float) -> dict[str, np.ndarray]:
    """The whole-frame metrics of one episode, one value per frame (NaN: none that frame)."""
    values = metric_values(result.stats.get("whole", {}), psnr_max_db)
    return {name: np.asarray(v, np.float64) for name, v in values.items()
            if len(v) == result.frames}


def _clip_arrays(clip: Clip, T_cam_from_world: np.ndarray | None) -> dict[str, np.ndarray]:
    """A clip as the writer wants it: points back in each frame's own camera (the evaluator
    keeps them in the first frame's), zeros off `valid`."""
    arrays = {"rgb": clip.rgb}
    if clip.pointmap is not None:
        points = clip.pointmap.astype(np.float32, copy=True)
        if T_cam_from_world is not None and not np.allclose(T_cam_from_world,
                                                            T_cam_from_world[:1]):
            T_cam_from_cam0 = T_cam_from_world @ np.linalg.inv(T_cam_from_world[:1])
            points = (np.einsum("tij,thwj->thwi", T_cam_from_cam0[:, :3, :3], points)
                      + T_cam_from_cam0[:, None, None, :3, 3]).astype(np.float32)
        points[~clip.valid] = 0
        arrays["pointmap"], arrays["mask"] = points, clip.valid
    if clip.robot_mask is not None:
        arrays["robot_mask"] = clip.robot_mask
    return arrays


def write_comparison(path: Path, pred: Clip, gt: Clip, camera: Camera | list[Camera],
                     result: EpisodeResult, *, psnr_max_db: float, method: str = "model",
                     fps: float = 24.0) -> Path:
    """Write one episode's (or pair's) comparison recording to `path`."""
    from k4d.recording import write_comparison_recording

    from k4d_eval.inputs import camera_extrinsics

    T_cam_from_world = (gt.T_cam_from_world if gt.T_cam_from_world is not None
                        else camera_extrinsics(camera, gt.frames))
    metrics = per_frame_metrics(result, psnr_max_db)
    return write_comparison_recording(
        path, ground_truth=_clip_arrays(gt, T_cam_from_world),
        prediction=_clip_arrays(pred, T_cam_from_world), camera=camera, metrics=metrics,
        fps=fps, title=f"Kinema4D evaluation: {result.episode_id}",
        info={"episode": result.episode_id, "prediction": method,
              **{k: (None if np.all(np.isnan(v)) else round(float(np.nanmean(v)), 6))
                 for k, v in metrics.items() if k in ("psnr", "ssim", "chamfer_l1", "fscore")}})
