"""Pixel regions every metric is broken down by.

  whole          every pixel
  robot          the robot's pixels: the robot condition's mask when the prediction came
                 with one (what the model was given), else the ground truth's robot_mask
  environment    everything else: what the model must predict
  moving_object  synthetic episodes: where the ground truth differs from frame 0 outside
                 the robot; with object_ids, the pixels of objects that moved, where they
                 are and where they started (object_poses decide which moved, else their
                 pixels changing). It holds the frames before they move too, where copying
                 the input is exact.
  changed        frame t's pixels outside the robot (in frame t and in frame 0) whose ground
                 truth differs from frame 0 (`k4d_tabletop.scene_change`: any RGB channel by more
                 than 25 levels or depth by more than 1 cm, where both depths are valid).
                 What a model has to generate; copying the input is wrong here by
                 definition. The trainer weights its loss by the same rule.
  static         the other pixels outside the robot (in frame t and in frame 0): where the
                 right answer is the input itself.
  objects        episodes with object_ids: the pixels where an object (ids >= 1) is in frame
                 t or was in frame 0, outside the robot, moved or not (issue 45): where it
                 went and where it left. Objects are ~1 % of the frame, so the whole
                 frame's figures do not see them sit centimetres off, and everything a
                 rollout does to an object starts from where it stands.
  objects_arrived  the part of `objects` where an object is in frame t and that object was
                 not there in frame 0: where a model has to draw an object that came
  objects_left   the part where an object was in frame 0 and none is in frame t: where it
                 has to draw what the object uncovered
  objects_stayed the part where the same object is in both frames
                 The three split `objects` (each pixel in one), so its error can be read
                 apart: a model that fades a moved object where it stood but does not draw
                 it where it went scores well on `objects_left` and near the floor on
                 `objects_arrived`, where the floor is wrong by definition.
"""

from __future__ import annotations

import numpy as np
from k4d_tabletop import scene_change

from k4d_eval.clip import Clip

REGIONS = ("whole", "robot", "environment", "moving_object", "changed", "static",
           "objects", "objects_arrived", "objects_left", "objects_stayed")
MOVED_M = 0.005          # an object moved when its position changed by more than 5 mm
MOVED_RAD = np.deg2rad(2.0)  # ... or its orientation by more than 2 degrees


def build_regions(gt: Clip, condition_robot_mask: np.ndarray | None = None,
                  synthetic: bool = False) -> dict[str, np.ndarray]:
    """-> name -> (T, H, W) bool. `robot` and `environment` exist when a robot mask is
    known, `moving_object` for synthetic ground truth, `objects` with object ids."""
    T, (H, W) = gt.frames, gt.size
    regions = {"whole": np.ones((T, H, W), dtype=bool)}
    robot = condition_robot_mask if condition_robot_mask is not None else gt.robot_mask
    if robot is not None:
        robot = np.asarray(robot, dtype=bool)
        regions["robot"] = robot
        regions["environment"] = ~robot
    if synthetic or gt.object_ids is not None:
        regions["moving_object"] = moving_object_region(gt, robot)
    if robot is not None:
        outside = ~robot & ~robot[:1]
        changed = changed_from_first(gt) & outside
        regions["changed"] = changed
        regions["static"] = outside & ~changed
    if gt.object_ids is not None:
        regions.update(object_regions(np.asarray(gt.object_ids), robot))
    return regions


def object_regions(object_ids: np.ndarray, robot: np.ndarray | None) -> dict[str, np.ndarray]:
    """(T, H, W) object ids (>= 1 an object) -> `objects` and its three parts (module doc),
    outside `robot` when given."""
    now, first = object_ids >= 1, object_ids[:1] >= 1
    outside = ~robot if robot is not None else np.ones(object_ids.shape, dtype=bool)
    same = now & (object_ids == object_ids[:1])
    return {"objects": (now | first) & outside,
            "objects_arrived": now & ~same & outside,
            "objects_left": first & ~now & outside,
            "objects_stayed": same & outside}


def changed_from_first(gt: Clip) -> np.ndarray:
    """(T, H, W) bool: where the ground truth differs from its frame 0 (k4d_tabletop.scene_change)."""
    return scene_change.changed_from_first(gt.rgb, gt.depth)


def moved_objects(object_poses: np.ndarray) -> list[int]:
    """(T, K, 7) poses -> ids (1-based) of objects whose pose left frame 0's."""
    poses = np.asarray(object_poses, dtype=np.float64)
    shift = np.linalg.norm(poses[:, :, :3] - poses[:1, :, :3], axis=-1).max(axis=0)
    q0 = poses[:1, :, 3:] / np.linalg.norm(poses[:1, :, 3:], axis=-1, keepdims=True)
    q = poses[:, :, 3:] / np.linalg.norm(poses[:, :, 3:], axis=-1, keepdims=True)
    dot = np.clip(np.abs(np.sum(q * q0, axis=-1)), 0.0, 1.0)
    turn = (2.0 * np.arccos(dot)).max(axis=0)
    return [k + 1 for k in range(poses.shape[1]) if shift[k] > MOVED_M or turn[k] > MOVED_RAD]


def moving_object_region(gt: Clip, robot: np.ndarray | None) -> np.ndarray:
    """(T, H, W) bool; see the module doc."""
    not_robot = ~robot if robot is not None else np.ones(gt.rgb.shape[:3], dtype=bool)
    if gt.object_ids is not None:
        ids = np.asarray(gt.object_ids)
        if gt.object_poses is not None and np.asarray(gt.object_poses).shape[1] > 0:
            moving = moved_objects(gt.object_poses)
        else:
            present = [int(k) for k in np.unique(ids) if k >= 1]
            moving = [k for k in present if np.any((ids == k) != (ids[:1] == k))]
        if not moving:
            return np.zeros(ids.shape, dtype=bool)
        return (np.isin(ids, moving) | np.isin(ids[:1], moving)) & not_robot
    diff = changed_from_first(gt)
    if robot is not None:
        not_robot = not_robot & ~robot[:1]
    return diff & not_robot
