"""Files of a finished rollout in an output directory (what `k4d simulate` writes).

    rgb.mp4                 generated RGB video
    pointmap.npz            pointmap (T, H, W, 3) float32 first-frame camera frame,
                            mask (T, H, W) bool (valid points), rgb (T, H, W, 3) uint8
    robot.npz               the robot condition: link_names, joint_names, joints, poses,
                            depth, pointmap, mask, link_id, rgb
    pointmap_k4d.mp4/.json  the Kinema4D 8-bit pointmap video + per-frame centre/scale
    summary.json            inputs, model, seed, per-stage timings
    viewer.html             self-contained 4D point-cloud player (WebGL, every pixel's point)
    rollout.rrd             Rerun recording (docs/viewing.md), when rerun-sdk is installed
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
from k4d.camera import Camera
from k4d.pointmap_video import write_pointmap_video as _write_pointmap_video
from k4d.recording import RECORDING_FILE, LinkMesh, is_rerun_available
from k4d.video import write_video as _write_mp4

log = logging.getLogger("k4d.simulate")

RGB_VIDEO = "rgb.mp4"
POINTMAP_NPZ = "pointmap.npz"
ROBOT_NPZ = "robot.npz"
SUMMARY_JSON = "summary.json"
VIEWER_HTML = "viewer.html"
RECORDING_RRD = RECORDING_FILE
ROBOT_NPZ_KEYS = ("link_names", "joint_names", "joints", "poses", "depth", "pointmap", "mask",
                  "link_id", "rgb")


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: float = 24.0) -> Path:
    """(T, H, W, 3) uint8 -> H.264 yuv420p mp4 that plays everywhere (k4d.video, lossy)."""
    return _write_mp4(path, frames, fps=fps, lossless=False)


def write_json(path: str | os.PathLike, data: dict) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")
    os.replace(tmp, path)
    return path


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def save_npz_fast(path: str | os.PathLike, arrays: dict[str, np.ndarray],
                  compresslevel: int = 1) -> Path:
    """An NPZ file (readable by np.load, allow_pickle=False) deflated at level 1:
    dense float pointmaps compress ~4x faster than np.savez_compressed's level 6 for a
    few percent more bytes. Written to a temp name, then renamed."""
    import zipfile

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED,
                         compresslevel=compresslevel, allowZip64=True) as archive:
        for key, array in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array),
                                          allow_pickle=False)
    os.replace(tmp, path)
    return path


def write_pointmap_npz(path, pointmap: np.ndarray, mask: np.ndarray, rgb: np.ndarray) -> Path:
    return save_npz_fast(path, {"pointmap": pointmap.astype(np.float32),
                                "mask": mask.astype(bool), "rgb": rgb.astype(np.uint8)})


def write_robot_npz(path, arrays: dict[str, np.ndarray]) -> Path:
    missing = [k for k in ROBOT_NPZ_KEYS if k not in arrays]
    if missing:
        raise ValueError(f"robot condition lacks {missing}")
    return save_npz_fast(path, {k: arrays[k] for k in ROBOT_NPZ_KEYS})


def world_point_mask(pointmap: np.ndarray) -> np.ndarray:
    """(T, H, W) bool: pixels with a point (finite, in front of the camera)."""
    return np.all(np.isfinite(pointmap), axis=-1) & (pointmap[..., 2] > 0)


def write_pointmap_video(out_dir: Path, pointmap: np.ndarray, mask: np.ndarray,
                         fps: float) -> tuple[Path, Path]:
    """The Kinema4D 8-bit pointmap video + pointmap_k4d.json (k4d.pointmap_video: the one
    writer and schema in the repo)."""
    return _write_pointmap_video(out_dir, pointmap, mask, fps,
                                 mask_source=f"the `mask` array of {POINTMAP_NPZ}")


def rollout_title(static_world: bool) -> str:
    return "Kinema4D rollout" + (" (STATIC-WORLD, not generated)" if static_world else "")


def robot_link_meshes(renderer) -> list[LinkMesh]:
    """The projection renderer's link meshes (link frame), for the recording."""
    return [LinkMesh(renderer.link_names[m.link_index], m.vertices, m.faces,
                     tuple(np.asarray(m.face_rgb, np.float64).mean(axis=0)))
            for m in renderer.link_meshes]


def model_note(summary: dict) -> dict:
    """{"about the model": ...} for a model shipped with a description (k4d_embedded.shipped:
    e.g. a small model trained on synthetic data, early checkpoint), else {}."""
    model = summary["model"]
    if not model.get("description"):
        return {}
    label = f" ({model['label']})" if model.get("label") else ""
    return {"about the model": f"{model['description']}{label}"}


def write_recording(path, result, summary: dict, *, fps: float, camera: Camera,
                    link_meshes=()) -> Path:
    """rollout.rrd: the generated world, the robot condition, FK link frames and meshes,
    joints and actions (docs/viewing.md)."""
    from k4d.recording import write_episode_recording

    gen, kin, proj = result.generation, result.kinematics, result.projection
    actions = json.loads(Path(summary["inputs"]["actions"]).read_text())
    info = {"model": summary["model"]["id"], **model_note(summary),
            "robot": summary["inputs"]["robot"],
            "seed": summary["seed"], "pointmap": "first-frame camera frame, "
                                                 + summary.get("pointmap_units", "metres")}
    return write_episode_recording(
        path, rgb=gen.rgb, camera=camera, pointmap=gen.pointmap,
        mask=world_point_mask(gen.pointmap), robot_pointmap=proj.pointmap, robot_mask=proj.mask,
        joints=kin.joints, joint_names=kin.joint_names, actions=actions,
        link_poses=kin.poses, link_names=kin.link_names, link_meshes=link_meshes, fps=fps,
        title=rollout_title(gen.static_world), notice=summary.get("notice", ""), info=info)


def write_rollout(out_dir: str | os.PathLike, result, summary: dict, *, fps: float = 24.0,
                  viewer_points: int | None = None, focal_px: float | None = None,
                  camera: Camera | None = None, link_meshes=(),
                  record: bool = True) -> dict[str, Path]:
    """Write every output file of an EmbeddedResult; returns name -> path. rollout.rrd is
    written when `record`, a `camera` is given and rerun-sdk is installed. It is
    written in turn with the other files: on a thread beside them it added +34 % wall time
    for +3 % CPU on the loaded 2-core VM, in turn +11 % wall, +2 % CPU
    (docs/benchmarks/viewer.md)."""
    from k4d_embedded.viewer import write_viewer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = result.generation
    mask = world_point_mask(gen.pointmap)
    record = record and camera is not None
    if record and not is_rerun_available():
        log.warning("%s not written: rerun-sdk is not installed (pip install "
                    "'k4d-runtime[viz]')", RECORDING_RRD)
        record = False
    paths = {
        "rgb_video": write_video(out / RGB_VIDEO, gen.rgb, fps),
        "pointmap": write_pointmap_npz(out / POINTMAP_NPZ, gen.pointmap, mask, gen.rgb),
        "robot": write_robot_npz(out / ROBOT_NPZ, result.robot_arrays()),
    }
    paths["pointmap_video"], paths["pointmap_video_metadata"] = write_pointmap_video(
        out, gen.pointmap, mask, fps)
    info = {"model": summary["model"]["id"], **model_note(summary),
            "robot": summary["inputs"]["robot"],
            "frames": gen.rgb.shape[0], "seed": summary["seed"]}
    paths["viewer"] = write_viewer(out / VIEWER_HTML, gen.rgb, gen.pointmap, mask,
                                   title=rollout_title(gen.static_world),
                                   static_world=gen.static_world, info=info, fps=fps / 2,
                                   max_points=viewer_points, focal_px=focal_px,
                                   focus=result.projection.mask)
    if record:
        paths["recording"] = write_recording(out / RECORDING_RRD, result, summary, fps=fps,
                                             camera=camera, link_meshes=link_meshes)
    summary = dict(summary, outputs={k: p.name for k, p in paths.items()})
    paths["summary"] = write_json(out / SUMMARY_JSON, summary)
    return paths
