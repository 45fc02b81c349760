"""The automatic pointmap success judge of the synthetic tabletop tasks (pick, push, stack),
shared by the evaluator (`k4d eval`'s policy agreement) and the policy evaluator (`k4d
policy-eval`, world-model rollouts). Moved from k4d_eval.policy (issue 18).

It finds the target object in a clip by its colour in frame 0 (its pixels there are given,
e.g. from ground-truth object ids of what the initial scene shows), reads the object's 3D
position from the clip's pointmap in that region frame by frame (median of its points, in
the world frame of the camera) and applies the data engine's rules (`k4d_tabletop.tasks.judge`)
as far as pointmaps show them:
  pick   lifted > LIFT_M at some frame and resting again at the end (final height within
         REST_M of the start); with the task's goal (`goal_xy`, the place marker), ending
         within PICK_GOAL_M of it horizontally
  push   moved >= PUSH_M along the direction named in the task text (left, right,
         forward, back), else horizontally; with the task's goal, ending within PUSH_GOAL_M
         of it
  stack  object 1 ends within STACK_XY_M of object 2 horizontally and >= STACK_Z_M above
         it, object 2 moved <= BASE_MOVED_M

With the objects' known frame-0 positions (`start_xyz`: the scene the caller set up, a data
engine episode's object poses), each track is read as its displacement since frame 0 added to
that start: the median of an object's visible points lies up to ~1 cm off its centre (on its
top and the faces the camera sees), which decided placements within a centimetre of a
tolerance, and a displacement does not carry that offset.

A clip is any object with `rgb` (T, H, W, 3) uint8, `pointmap` (T, H, W, 3) float32 in the
first frame's camera (metres), `valid` (T, H, W) bool and `robot_mask` (T, H, W) bool or
None (k4d_eval's Clip, or `JudgeClip` below).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class JudgeClip:
    """The arrays the judge reads (shapes in the module docstring)."""

    rgb: np.ndarray
    pointmap: np.ndarray
    valid: np.ndarray
    robot_mask: np.ndarray | None = None

    @property
    def frames(self) -> int:
        return int(self.rgb.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        return int(self.rgb.shape[1]), int(self.rgb.shape[2])


LIFT_M = 0.05
REST_M = 0.02
PUSH_M = 0.7 * 0.12   # 0.7 x the data engine's push distance
PICK_GOAL_M = 0.04    # the data engine's place tolerance (k4d_tabletop.tasks.PICK_TOLERANCE_M)
PUSH_GOAL_M = 0.05    # and its push goal tolerance (k4d_tabletop.tasks.judge)
STACK_XY_M = 0.03
STACK_Z_M = 0.02
BASE_MOVED_M = 0.03
PUSH_DIRECTIONS = {"left": (0.0, 1.0), "right": (0.0, -1.0), "forward": (1.0, 0.0),
                   "back": (-1.0, 0.0)}
COLOUR_TOL = 40.0      # RGB distance from the object's frame-0 median colour
MIN_PIXELS = 20        # fewer matching pixels (or a quarter of its frame-0 pixels): unseen
SEARCH_RADIUS = 0.08   # tracking window, as a share of the image width
SUPPORT_CLEARANCE_M = 0.008  # an object's points stand this far above what it rests on
MAX_JUMP_M = 0.3       # farthest an object moves between two frames when searched for anew
JUDGED_KINDS = ("pick", "push", "stack")


def object_track(clip, colour: np.ndarray, start: np.ndarray,
                 T_world_from_cam0: np.ndarray) -> np.ndarray:
    """(T, 3) world position of the object per frame (NaN where unseen).

    Frame 0 uses the object's known pixels `start` (H, W). Later frames: the clip's valid
    pixels off the robot whose colour is within COLOUR_TOL of any of the object's frame-0
    colours (lit tops and shaded sides differ by more than the tolerance, so one median
    colour missed half of a small object) and whose point stands SUPPORT_CLEARANCE_M above
    the surface around the object in frame 0 (a grey object on a grey table otherwise
    takes the table with it). Of the connected pieces near where the object was last seen
    (a window of SEARCH_RADIUS of the image width, or twice its size), the one nearest in
    3D to its last position wins; when none is there (a grasped object crosses the image
    between two frames of a short clip) the whole image is searched, up to MAX_JUMP_M from
    its last position. Its position is the median of that piece's points. `colour` is
    kept for callers; the palette comes from `start`."""

    T, (H, W) = clip.frames, clip.size
    track = np.full((T, 3), np.nan)
    R, tr = T_world_from_cam0[:3, :3], T_world_from_cam0[:3, 3]
    min_pixels = _min_pixels(start)
    radius = max(SEARCH_RADIUS * W, 2.0 * np.sqrt(start.sum()))
    vv, uu = np.mgrid[0:H, 0:W]
    seen0 = start & clip.valid[0]
    palette = np.unique(clip.rgb[0][seen0].reshape(-1, 3), axis=0).astype(np.float32)
    if palette.size == 0:
        palette = np.asarray(colour, np.float32).reshape(1, 3)
    support = _support_height(clip, start, R, tr)
    centre, last = np.argwhere(start).mean(axis=0), None
    for t in range(T):
        if t == 0:
            region = seen0
        else:
            world = clip.pointmap[t].astype(np.float64) @ R.T + tr
            rgb = clip.rgb[t].astype(np.float32).reshape(-1, 1, 3)
            dist = np.linalg.norm(rgb - palette[None], axis=-1).min(axis=1).reshape(H, W)
            candidates = (dist < COLOUR_TOL) & clip.valid[t] & (world[..., 2] > support)
            if clip.robot_mask is not None:
                candidates &= ~clip.robot_mask[t]
            near = (vv - centre[0]) ** 2 + (uu - centre[1]) ** 2 <= radius ** 2
            region = _nearest_piece(candidates & near, world, last, min_pixels)
            if region is None and last is not None:
                region = _nearest_piece(candidates, world, last, min_pixels, MAX_JUMP_M)
            if region is None:
                continue
        if region.sum() >= min_pixels:
            track[t] = np.median(clip.pointmap[t][region].astype(np.float64), axis=0) @ R.T + tr
            centre, last = np.argwhere(region).mean(axis=0), track[t]
    return track


def _support_height(clip, start: np.ndarray, R: np.ndarray, tr: np.ndarray) -> float:
    """World height the object's points must exceed: the median height of a thin ring of
    pixels around it in frame 0 (what it stands on) + SUPPORT_CLEARANCE_M, and never above
    its own frame-0 median height - SUPPORT_CLEARANCE_M (around it may be a wall behind,
    not a table below); -inf when the ring has no point."""
    from scipy import ndimage

    ring = (ndimage.binary_dilation(start, iterations=3)
            & ~ndimage.binary_dilation(start, iterations=1) & clip.valid[0])
    own = start & clip.valid[0]
    if not ring.any() or not own.any():
        return -np.inf
    around = np.median(clip.pointmap[0][ring].astype(np.float64) @ R[2]) + tr[2]
    itself = np.median(clip.pointmap[0][own].astype(np.float64) @ R[2]) + tr[2]
    return float(min(around + SUPPORT_CLEARANCE_M, itself - SUPPORT_CLEARANCE_M))


def _nearest_piece(mask: np.ndarray, world: np.ndarray, last: np.ndarray | None,
                   min_pixels: int, max_jump: float = np.inf) -> np.ndarray | None:
    """The connected piece of `mask` (>= min_pixels) whose median point is nearest `last`
    (within max_jump); with no last position, every candidate pixel; None when none."""
    from scipy import ndimage

    if mask.sum() < min_pixels:
        return None
    if last is None:
        return mask
    labels, count = ndimage.label(mask)
    best, best_d = None, max_jump
    for k in range(1, count + 1):
        piece = labels == k
        if piece.sum() < min_pixels:
            continue
        d = float(np.linalg.norm(np.median(world[piece], axis=0) - last))
        if d <= best_d:
            best, best_d = piece, d
    return best


def _near_goal(verdict: dict, end: np.ndarray, goal: np.ndarray | None, tolerance: float
               ) -> dict:
    """The verdict, also requiring the object to end within `tolerance` of the goal (x, y)
    when there is one."""
    if goal is None:
        return verdict
    error = float(np.linalg.norm(end[:2] - goal))
    return {**verdict, "success": verdict["success"] and error <= tolerance,
            "rule": f"{verdict['rule']}, ending within {tolerance} m of the goal",
            "goal_error_m": error}


def _min_pixels(start: np.ndarray) -> int:
    """Matching pixels a frame needs for the object to count as seen: a quarter of its
    frame-0 pixels, at least 3, at most MIN_PIXELS."""
    return int(np.clip(start.sum() // 4, 3, MIN_PIXELS))


def _final(track: np.ndarray) -> np.ndarray | None:
    seen = np.flatnonzero(~np.isnan(track[:, 0]))
    return track[seen[-1]] if len(seen) and seen[-1] > 0 else None


def _direction(task_text: str) -> np.ndarray | None:
    words = task_text.lower().replace(",", " ").replace(".", " ").split()
    for name, d in PUSH_DIRECTIONS.items():
        if name in words:
            return np.asarray(d)
    return None


def start_positions(object_poses: np.ndarray) -> dict[int, np.ndarray]:
    """`judge`'s start_xyz from frame 0's object poses (K, 7) (world xyz + quaternion, objects
    1..K in order, as the data engine and MuJoCo give them)."""
    return {k + 1: np.asarray(pose[:3], np.float64) for k, pose in enumerate(object_poses)}


def judge(clip, object_ids0: np.ndarray, task_kind: str,
          T_cam0_from_world: np.ndarray, task_text: str = "",
          goal_xy: np.ndarray | None = None,
          start_xyz: dict[int, np.ndarray] | None = None) -> dict:
    """-> {"success": bool | None, "rule": str, measured values}; success None when the
    task kind has no rule or an object cannot be found. goal_xy: the task's goal in the
    world frame (x, y), when the caller knows it (the policy evaluator's scenes; a data
    engine episode's `source.goal_xy`): a pick or a push must also end near it, as the
    data engine's own judge requires. start_xyz: {k: (3,) world position of object k's
    centre in frame 0}, when the caller knows the initial scene: tracks become
    displacements from it (module docstring)."""
    if task_kind not in JUDGED_KINDS or clip.pointmap is None:
        return {"success": None, "rule": f"no automatic rule for task kind {task_kind!r}"}
    T_world_from_cam0 = np.linalg.inv(T_cam0_from_world)
    tracks = {}
    for k in ((1, 2) if task_kind == "stack" else (1,)):
        start = object_ids0 == k
        if start.sum() < 3:
            return {"success": None, "rule": f"object {k} is not visible in frame 0 (fewer "
                                             "than 3 pixels)"}
        colour = np.median(clip.rgb[0][start].astype(np.float32), axis=0)
        tracks[k] = object_track(clip, colour, start, T_world_from_cam0)
        if start_xyz is not None and k in start_xyz and not np.isnan(tracks[k][0, 0]):
            tracks[k] = tracks[k] - tracks[k][0] + np.asarray(start_xyz[k], np.float64).reshape(3)
    track = tracks[1]
    start1, end1 = track[0], _final(track)
    if end1 is None or np.isnan(start1[0]):
        return {"success": None, "rule": f"object 1 is not found after frame 0 (fewer than "
                                         f"{_min_pixels(object_ids0 == 1)} pixels of its colour "
                                         "with points near where it was last seen)"}
    goal = None if goal_xy is None else np.asarray(goal_xy, np.float64).reshape(2)
    if task_kind == "pick":
        lift = float(np.nanmax(track[:, 2]) - start1[2])
        rest = float(abs(end1[2] - start1[2]))
        verdict = {"success": lift > LIFT_M and rest <= REST_M,
                   "rule": f"lifted > {LIFT_M} m, final height within {REST_M} m of the start",
                   "lift_m": lift, "final_height_change_m": rest}
        return _near_goal(verdict, end1, goal, PICK_GOAL_M)
    if task_kind == "push":
        direction = _direction(task_text)
        step = end1[:2] - start1[:2]
        moved = float(step @ direction if direction is not None else np.linalg.norm(step))
        verdict = {"success": moved >= PUSH_M, "moved_m": moved,
                   "rule": f"moved >= {PUSH_M:.3f} m " + ("along the task's direction"
                                                          if direction is not None else "horizontally")}
        return _near_goal(verdict, end1, goal, PUSH_GOAL_M)
    base = tracks[2]
    end2 = _final(base)
    end2 = base[0] if end2 is None else end2  # the base object may be hidden under object 1
    xy, dz = float(np.linalg.norm(end1[:2] - end2[:2])), float(end1[2] - end2[2])
    base_moved = float(np.linalg.norm(end2[:2] - base[0, :2]))
    return {"success": xy <= STACK_XY_M and dz >= STACK_Z_M and base_moved <= BASE_MOVED_M,
            "rule": f"object 1 within {STACK_XY_M} m of object 2 horizontally, >= {STACK_Z_M} m "
                    f"above it, object 2 moved <= {BASE_MOVED_M} m",
            "xy_m": xy, "dz_m": dz, "base_moved_m": base_moved}
