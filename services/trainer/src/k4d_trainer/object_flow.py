"""The ground truth's motion of the scene's surfaces, made from what a synthetic episode
records: per-pixel object ids, each object's world pose per frame and the camera's pose per
frame. Training targets, never model inputs.

- `backward_flow`: where in frame 0 each pixel of frame t came from (the warping sample
  refiner's target, k4d_model.cascade `cascade.warp`). A pixel of object k at frame t is
  carried back by that object's rigid motion; a table pixel (id -1) by the camera's alone:

    p_0 = C_0 · T_k,0 · T_k,t^-1 · C_t^-1 · p_t        (C: camera from world, T: world from object)

- `forward_tracks`: where each pixel's surface of frame 0 is at frame t (the transformer's
  pointmap half with `training.latent_target: tracks`, k4d_model.tracks): the same motion
  forwards, p_t = C_t · T_k,t · T_k,0^-1 · C_0^-1 · p_0.

then projected with the clip's pinhole, fitted from its own pointmap (so it holds after the
clip's resize and crop). The flow is valid where depth is known, off the robot, and its
source lies in the image (within half a pixel: the warp reads the border beyond).
"""

from __future__ import annotations

import numpy as np
from k4d.errors import InvalidArgument
from k4d.rotations import quat_to_matrix

from k4d_trainer.clips import OBJECT_IDS, ClipSpec, frame_indices, read_clip

POSES = "object_poses"


def fit_pinhole(pointmap: np.ndarray, known: np.ndarray) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) in pixels of (T, H, W, 3) camera-frame points: least squares of
    u = fx X / Z + cx (column) and v = fy Y / Z + cy (row) over the known pixels."""
    t, rows, cols = np.nonzero(known)
    if rows.size < 3:
        raise ValueError("fewer than 3 known points: no pinhole to fit")
    points = pointmap[t, rows, cols].astype(np.float64)
    x, y = points[:, 0] / points[:, 2], points[:, 1] / points[:, 2]
    (fx, cx), *_ = np.linalg.lstsq(np.stack([x, np.ones_like(x)], 1), cols.astype(np.float64),
                                   rcond=None)
    (fy, cy), *_ = np.linalg.lstsq(np.stack([y, np.ones_like(y)], 1), rows.astype(np.float64),
                                   rcond=None)
    return float(fx), float(fy), float(cx), float(cy)


def pose_matrices(poses: np.ndarray) -> np.ndarray:
    """(..., 7) xyz + quaternion xyzw -> (..., 4, 4) world from object."""
    poses = np.asarray(poses, np.float64)
    out = np.zeros(poses.shape[:-1] + (4, 4))
    out[..., :3, :3] = quat_to_matrix(poses[..., 3:7])
    out[..., :3, 3] = poses[..., :3]
    out[..., 3, 3] = 1.0
    return out


def backward_flow(pointmap: np.ndarray, object_ids: np.ndarray, object_poses: np.ndarray,
                  cam_from_world: np.ndarray, pixels: str = "all"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Flow (T, H, W, 2) float32, (dx, dy) in pixels from frame t's pixel to its source in
    frame 0, and where it is valid (T, H, W) bool (module docstring); with `pixels`
    "objects", valid on the objects' pixels alone (not the table's).

    pointmap (T, H, W, 3) camera frame, metres, zeros unknown; object_ids (T, H, W) (-1 table,
    0 robot, k object k); object_poses (T, K, 7); cam_from_world (T, 4, 4)."""
    frames, height, width = object_ids.shape
    known = np.isfinite(pointmap).all(-1) & (pointmap[..., 2] > 0)
    fx, fy, cx, cy = fit_pinhole(pointmap, known)
    world_from_object = pose_matrices(object_poses)  # (T, K, 4, 4)
    cam = np.asarray(cam_from_world, np.float64)
    flow = np.zeros((frames, height, width, 2), np.float32)
    valid = np.zeros((frames, height, width), bool)
    rows, cols = np.mgrid[0:height, 0:width]
    for t in range(frames):
        back = cam[0] @ np.linalg.inv(cam[t])  # a table point: the camera's motion only
        points = np.zeros((height, width, 3))
        ids = object_ids[t]
        for k in np.unique(ids[known[t] & (ids != 0)]):
            motion = back if k < 0 else (cam[0] @ world_from_object[0, k - 1]
                                         @ np.linalg.inv(world_from_object[t, k - 1])
                                         @ np.linalg.inv(cam[t]))
            mask = known[t] & (ids == k)
            points[mask] = pointmap[t][mask] @ motion[:3, :3].T + motion[:3, 3]
        here = known[t] & (ids != 0) & (points[..., 2] > 0)
        z = np.where(here, points[..., 2], 1.0)
        u, v = fx * points[..., 0] / z + cx, fy * points[..., 1] / z + cy
        # a source that rounds to a pixel of the image (the warp reads the border beyond)
        inside = (u > -0.5) & (u < width - 0.5) & (v > -0.5) & (v < height - 0.5)
        valid[t] = here & inside
        flow[t] = np.where(valid[t][..., None], np.stack([u - cols, v - rows], -1), 0.0)
    if pixels == "objects":
        valid &= object_ids > 0
    return flow, valid


def forward_tracks(pointmap: np.ndarray, object_ids: np.ndarray, object_poses: np.ndarray,
                   cam_from_world: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) float32: frame 0's point at each pixel carried to frame t by its surface's
    motion, in frame t's camera, metres; frame 0 is frame 0's pointmap. A table pixel (id -1)
    moves with the camera alone; frame 0's robot pixels (id 0) keep frame 0's point (the
    robot's motion is kinematics', not the scene's); unknown points (non-finite or z <= 0)
    stay zero in every frame.

    pointmap, object_ids, object_poses, cam_from_world: as `backward_flow`'s."""
    frames = object_ids.shape[0]
    first = np.nan_to_num(np.asarray(pointmap[0], np.float64))
    known = np.isfinite(pointmap[0]).all(-1) & (first[..., 2] > 0)
    ids = object_ids[0]
    world_from_object = pose_matrices(object_poses)  # (T, K, 4, 4)
    cam = np.asarray(cam_from_world, np.float64)
    tracks = np.zeros((frames,) + first.shape, np.float32)
    for t in range(frames):
        points = np.where(known[..., None], first, 0.0)
        for k in np.unique(ids[known & (ids != 0)]):
            motion = cam[t] @ np.linalg.inv(cam[0]) if k < 0 else (
                cam[t] @ world_from_object[t, k - 1] @ np.linalg.inv(world_from_object[0, k - 1])
                @ np.linalg.inv(cam[0]))
            mask = known & (ids == k)
            points[mask] = first[mask] @ motion[:3, :3].T + motion[:3, 3]
        tracks[t] = points
    return tracks


def episode_tracks(episode, clip: ClipSpec) -> np.ndarray:
    """forward_tracks of an opened episode at the clip's frames and size; InvalidArgument
    naming `training.latent_target` when the episode does not record what it needs."""
    return forward_tracks(*_motion_inputs(episode, clip, "training.latent_target", "tracks"))


def episode_flow(episode, clip: ClipSpec, pixels: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """backward_flow of an opened episode at the clip's frames and size; InvalidArgument
    naming `cascade.warp` when the episode does not record what it needs."""
    return backward_flow(*_motion_inputs(episode, clip, "cascade.warp", "warp's flow"), pixels)


def _motion_inputs(episode, clip: ClipSpec, field: str, what: str) -> tuple[np.ndarray, ...]:
    """(pointmap, object ids, object poses, cam_from_world) of an opened episode at the clip's
    frames and size; InvalidArgument naming `field` when the episode lacks one of them."""
    arrays = set(episode.meta.arrays)
    missing = [name for name in ("pointmap", OBJECT_IDS, POSES) if name not in arrays]
    if missing:
        raise InvalidArgument.for_field(
            field, f"episode {episode.meta.episode_id!r} lacks {missing}: the {what} targets "
                   "come from object ids, object poses and the pointmap")
    indices = frame_indices(episode.meta.frames, clip.num_frames)
    adapted = read_clip(episode, clip, extra=(OBJECT_IDS,))
    poses = np.asarray(episode[POSES])[indices]
    cams = np.stack([episode.meta.camera_at(int(t)).T_cam_from_world for t in indices])
    return adapted["pointmap"], adapted[OBJECT_IDS], poses, cams
