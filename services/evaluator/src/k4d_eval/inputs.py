"""Loaders: NPZ pairs, `k4d simulate` output directories and data engine episodes ->
`Clip`. Everything a user hands us is checked here (the boundary); a bad file is one
InvalidArgument naming it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from k4d.camera import Camera
from k4d.errors import InvalidArgument
from k4d.tensor_io import load_npz

from k4d_eval.clip import Clip

# What `k4d simulate` writes (services/simulator outputs.py; a public file surface).
SIM_POINTMAP_NPZ = "pointmap.npz"
SIM_ROBOT_NPZ = "robot.npz"
SIM_SUMMARY_JSON = "summary.json"


def _check_rgb(rgb: np.ndarray, field: str) -> np.ndarray:
    rgb = np.asarray(rgb)
    if rgb.ndim != 4 or rgb.shape[-1] != 3:
        raise InvalidArgument.for_field(field, f"expected (T, H, W, 3) uint8, got shape {rgb.shape}")
    if rgb.dtype != np.uint8:
        raise InvalidArgument.for_field(field, f"expected uint8 frames, got {rgb.dtype}")
    return rgb


def _check_mask(mask, shape, field: str) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.shape != tuple(shape):
        raise InvalidArgument.for_field(field, f"expected shape {tuple(shape)}, got {mask.shape}")
    return mask.astype(bool, copy=False)


def _check_pointmap(pointmap, valid, rgb_shape, field: str) -> tuple[np.ndarray, np.ndarray]:
    """-> (pointmap float32, valid). NaN/inf on a valid point is bad input; a missing
    mask means 'finite, non-zero points'."""
    pointmap = np.asarray(pointmap)
    if pointmap.shape != tuple(rgb_shape):
        raise InvalidArgument.for_field(field, f"expected shape {tuple(rgb_shape)} like rgb, "
                                               f"got {pointmap.shape}")
    if not np.issubdtype(pointmap.dtype, np.floating):
        raise InvalidArgument.for_field(field, f"expected float points, got {pointmap.dtype}")
    pointmap = pointmap.astype(np.float32, copy=False)
    finite = np.isfinite(pointmap).all(axis=-1)
    if valid is None:
        if not finite.all():
            raise InvalidArgument.for_field(
                field, f"{int((~finite).sum())} points are NaN or infinite (give a `mask` "
                       "array to mark invalid pixels)")
        valid = np.any(pointmap != 0, axis=-1)
    elif not finite[valid].all():
        raise InvalidArgument.for_field(
            field, f"{int((~finite[valid]).sum())} points inside the mask are NaN or infinite")
    return pointmap, valid


def clip_from_arrays(arrays: Mapping[str, np.ndarray], source: str) -> Clip:
    """NPZ keys (DESIGN.md): rgb; optional pointmap + mask (valid points), depth,
    robot_mask, object_ids, object_poses. `source` names the file in errors."""
    if "rgb" not in arrays:
        raise InvalidArgument.for_field(f"{source}:rgb", "required array missing")
    rgb = _check_rgb(arrays["rgb"], f"{source}:rgb")
    shape3 = rgb.shape[:3]
    clip = Clip(rgb=rgb)
    if "pointmap" in arrays:
        valid = _check_mask(arrays["mask"], shape3, f"{source}:mask") if "mask" in arrays else None
        clip.pointmap, clip.valid = _check_pointmap(arrays["pointmap"], valid, rgb.shape,
                                                    f"{source}:pointmap")
        clip.valid = clip.valid & (clip.pointmap[..., 2] > 0)
    if "depth" in arrays:
        depth = np.asarray(arrays["depth"], dtype=np.float32)
        if depth.shape != shape3:
            raise InvalidArgument.for_field(f"{source}:depth", f"expected {shape3}, got {depth.shape}")
        if not np.isfinite(depth).all():
            raise InvalidArgument.for_field(f"{source}:depth", "NaN or infinite depth values")
        clip.depth = depth
    elif clip.pointmap is not None:
        clip.depth = np.where(clip.valid, clip.pointmap[..., 2], 0).astype(np.float32)
    if "robot_mask" in arrays:
        clip.robot_mask = _check_mask(arrays["robot_mask"], shape3, f"{source}:robot_mask")
    if "object_ids" in arrays:
        clip.object_ids = np.asarray(arrays["object_ids"]).astype(np.int16)
        _check_mask(clip.object_ids, shape3, f"{source}:object_ids")
    if "object_poses" in arrays:
        poses = np.asarray(arrays["object_poses"], dtype=np.float64)
        if poses.ndim != 3 or poses.shape[0] != rgb.shape[0] or poses.shape[2] != 7:
            raise InvalidArgument.for_field(f"{source}:object_poses",
                                            f"expected ({rgb.shape[0]}, K, 7), got {poses.shape}")
        clip.object_poses = poses
    return clip


NPZ_EXPECTED = "an NPZ file (numpy.savez) with arrays rgb and optionally pointmap, mask"
# The first bytes of files people hand us by mistake, to say what the file is instead.
_MAGIC = {b"PK\x03\x04": "npz", b"PK\x05\x06": "npz", b"\x93NUMPY": "a single .npy array",
          b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image"}


def check_npz_file(path: str | Path) -> Path:
    """A path that should hold an NPZ file: absent, a directory, or another kind of file is
    one InvalidArgument naming the file and what was expected."""
    path = Path(path)
    if path.is_dir():
        hint = (" (a `k4d simulate` output directory: use `k4d eval --pred DIR --gt DATASET`)"
                if is_sim_dir(path) else "")
        raise InvalidArgument.for_field(str(path), f"is a directory; expected {NPZ_EXPECTED}{hint}")
    if not path.is_file():
        raise InvalidArgument.for_field(str(path), f"no such file; expected {NPZ_EXPECTED}")
    with path.open("rb") as f:
        head = f.read(8)
    kind = next((k for magic, k in _MAGIC.items() if head.startswith(magic)), None)
    if kind != "npz":
        what = kind or ("an empty file" if not head else "not a zip archive")
        raise InvalidArgument.for_field(str(path), f"is {what}; expected {NPZ_EXPECTED}")
    return path


def load_npz_clip(path: str | Path) -> Clip:
    import zipfile
    import zlib

    path = check_npz_file(path)
    try:
        arrays = load_npz(path, required=("rgb",))
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as exc:
        # A truncated or damaged archive: its zip directory or an array cannot be read.
        raise InvalidArgument.for_field(str(path), f"truncated or damaged NPZ file ({exc}); "
                                                   f"expected {NPZ_EXPECTED}") from None
    return clip_from_arrays(arrays, str(path))


# ---- cameras --------------------------------------------------------------------------
def camera_extrinsics(camera: Camera | list[Camera], frames: int) -> np.ndarray:
    """A Camera (or one per frame) -> (T, 4, 4) T_cam_from_world."""
    cameras = camera if isinstance(camera, list) else [camera] * frames
    return np.stack([cam.T_cam_from_world for cam in cameras])


def to_first_camera(pointmap: np.ndarray, valid: np.ndarray,
                    T_cam_from_world: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) points in each frame's camera -> in frame 0's camera (no-op when static)."""
    if np.allclose(T_cam_from_world, T_cam_from_world[:1]):
        return pointmap
    T_cam0_from_cam = T_cam_from_world[:1] @ np.linalg.inv(T_cam_from_world)
    out = np.einsum("tij,thwj->thwi", T_cam0_from_cam[:, :3, :3], pointmap.astype(np.float64))
    out += T_cam0_from_cam[:, None, None, :3, 3]
    out[~valid] = 0
    return out.astype(np.float32)


def depth_in_own_camera(pointmap_cam0: np.ndarray, valid: np.ndarray,
                        T_cam_from_world: np.ndarray | None) -> np.ndarray:
    """z of first-frame-camera points in each frame's own camera, 0 off `valid`."""
    if T_cam_from_world is None or np.allclose(T_cam_from_world, T_cam_from_world[:1]):
        z = pointmap_cam0[..., 2]
    else:
        T_cam_from_cam0 = T_cam_from_world @ np.linalg.inv(T_cam_from_world[:1])
        z = np.einsum("tj,thwj->thw", T_cam_from_cam0[:, 2, :3], pointmap_cam0.astype(np.float64))
        z = z + T_cam_from_cam0[:, None, None, 2, 3]
    return np.where(valid, z, 0).astype(np.float32)


# ---- k4d simulate output directories ----------------------------------------------------
def is_sim_dir(path: Path) -> bool:
    return (path / SIM_POINTMAP_NPZ).is_file()


def load_sim_dir(path: str | Path, T_cam_from_world: np.ndarray | None = None
                 ) -> tuple[Clip, np.ndarray | None, dict]:
    """A `k4d simulate` output directory -> (prediction clip, the robot condition's mask
    (T, H, W) or None, summary.json). Points are in the first frame's camera already;
    `T_cam_from_world` (ground truth's cameras) turns them into per-frame depth."""
    path = Path(path)
    if not is_sim_dir(path):
        raise InvalidArgument.for_field(str(path), f"not a `k4d simulate` output directory "
                                                   f"(no {SIM_POINTMAP_NPZ})")
    arrays = load_npz(path / SIM_POINTMAP_NPZ, required=("rgb", "pointmap", "mask"))
    clip = clip_from_arrays({k: arrays[k] for k in ("rgb", "pointmap", "mask")},
                            str(path / SIM_POINTMAP_NPZ))
    clip.depth = depth_in_own_camera(clip.pointmap, clip.valid, T_cam_from_world)
    condition = None
    if (path / SIM_ROBOT_NPZ).is_file():
        robot = load_npz(path / SIM_ROBOT_NPZ, required=("mask",))
        condition = _check_mask(robot["mask"], clip.rgb.shape[:3], str(path / SIM_ROBOT_NPZ) + ":mask")
        clip.robot_mask = condition  # the prediction's robot pixels are the condition's
    summary = {}
    if (path / SIM_SUMMARY_JSON).is_file():
        try:
            summary = json.loads((path / SIM_SUMMARY_JSON).read_text())
        except ValueError as exc:
            raise InvalidArgument.for_field(str(path / SIM_SUMMARY_JSON), f"not JSON: {exc}") from None
    return clip, condition, summary


# ---- data engine episodes -------------------------------------------------------------
def load_episode(dataset, episode_id: str) -> Clip:
    """A data engine episode -> ground-truth clip, points moved into the first frame's
    camera (the frame `k4d simulate` predicts in)."""
    episode = dataset.open(episode_id)
    meta = episode.meta
    arrays = {name: episode.read(name) for name in
              ("rgb", "depth", "pointmap", "robot_mask", "object_ids", "object_poses")
              if name in episode.arrays}
    if "pointmap" not in arrays and "depth" in arrays:
        try:  # the camera's rays, lens distortion included
            arrays["pointmap"] = np.stack([meta.camera_at(t).points_from_depth(depth)
                                           for t, depth in enumerate(arrays["depth"])])
        except ValueError as exc:
            raise InvalidArgument.for_field(f"{episode_id}:depth", str(exc)) from None
    if "pointmap" in arrays and "depth" in arrays:
        arrays["mask"] = arrays["depth"] > 0
    clip = clip_from_arrays(arrays, f"{episode_id}")
    clip.camera = meta.camera
    clip.T_cam_from_world = camera_extrinsics(meta.camera, meta.frames)
    if clip.pointmap is not None:
        clip.pointmap = to_first_camera(clip.pointmap, clip.valid, clip.T_cam_from_world)
    clip.meta = meta.to_dict()
    return clip
