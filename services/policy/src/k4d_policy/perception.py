"""What a reference policy sees: object positions read from ONE observation (RGB + pointmap
+ the camera pose), never from simulator state.

The task text names objects by colour ("push the red cube left"); the palette of the
synthetic scenes (`k4d_tabletop.scene.COLOURS`) says what those colours look like. Points
are moved from the camera frame into the robot base frame (the table top is z = 0); points
above the table inside the workspace are grouped into blobs (3D neighbours), and the blob
whose mean colour best matches the named colour under any shading is the object. Flat
things on the table (the place marker) are looked for among the points at table height.
At the clip sizes of the world model (96 x 144) an object covers a handful of pixels, so
estimates are coarse (about a centimetre): that is part of what the policies are graded on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from k4d_tabletop.scene import COLOURS

# Where objects can be: the table's workspace in the base frame (metres).
WORKSPACE_X = (0.2, 0.85)
WORKSPACE_Y = (-0.45, 0.45)
ABOVE_TABLE_M = 0.006   # points higher than this belong to objects (or the robot)
MAX_OBJECT_Z = 0.14
FLAT_Z = 0.005          # |z| below this: on the table (marker)
BLOB_LINK_M = 0.02      # points closer than this join one blob
ROBOT_CLEARANCE_M = 0.05  # points this close to a robot link origin are the robot's
SHADE = (0.3, 1.25)     # how much darker / brighter than its palette colour a surface renders
MAX_COLOUR_RESIDUAL = 0.22
TOP_FACE_M = 0.008
# Measured on 24 held-out objects (seed 7000): the top face's visible centre lies 0.44 x the
# object's half height nearer the camera than the true centre (1.0 cm on average).
VIEW_BIAS = 0.44


@dataclass
class Seen:
    """An object as seen: xy centre, top height (m, base frame), pixel count and how well
    its colour matched (RGB residual in [0, 1] units, lower is better)."""

    xy: np.ndarray
    top_z: float
    pixels: int
    residual: float

    @property
    def half_height(self) -> float:
        return max(self.top_z / 2.0, 0.01)


def colours_in(text: str) -> list[str]:
    """Palette colour names in the order the text mentions them."""
    words = re.findall(r"[a-z]+", text.lower())
    return [w for w in words if w in COLOURS]


def base_points(pointmap: np.ndarray, T_cam_from_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(H, W, 3) camera-frame points -> ((H, W, 3) base-frame points, (H, W) valid)."""
    valid = np.isfinite(pointmap).all(-1) & (np.abs(pointmap).sum(-1) > 0)
    T = np.linalg.inv(T_cam_from_world)
    p = pointmap.astype(np.float64) @ T[:3, :3].T + T[:3, 3]
    return p, valid


def colour_residual(rgb01: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """Distance of (..., 3) colours in [0, 1] from `colour` seen under the best shading in SHADE."""
    c = np.asarray(colour, np.float64)
    s = np.clip((rgb01 @ c) / float(c @ c), *SHADE)
    return np.linalg.norm(rgb01 - s[..., None] * c, axis=-1)


def _blobs(points: np.ndarray) -> list[np.ndarray]:
    """Connected groups of (N, 3) points (link distance BLOB_LINK_M) as index arrays."""
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    if len(points) == 0:
        return []
    pairs = cKDTree(points).query_pairs(BLOB_LINK_M, output_type="ndarray")
    from scipy.sparse import coo_matrix

    n = len(points)
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n)) if len(pairs) \
        else coo_matrix((n, n))
    _, labels = connected_components(graph, directed=False)
    return [np.flatnonzero(labels == k) for k in range(labels.max() + 1)]


def find_object(rgb: np.ndarray, pointmap: np.ndarray, T_cam_from_world: np.ndarray, colour: str,
                robot_points: np.ndarray | None = None, flat: bool = False) -> Seen | None:
    """The blob of `colour` (a palette name) above the table (`flat`: on the table), or None
    when no blob matches within MAX_COLOUR_RESIDUAL. robot_points: (L, 3) base-frame link
    origins; points near them are ignored (the gripper near an object)."""
    p, valid = base_points(pointmap, T_cam_from_world)
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    keep = valid & (x > WORKSPACE_X[0]) & (x < WORKSPACE_X[1]) & (y > WORKSPACE_Y[0]) & (y < WORKSPACE_Y[1])
    keep &= (np.abs(z) < FLAT_Z) if flat else ((z > ABOVE_TABLE_M) & (z < MAX_OBJECT_Z))
    if robot_points is not None and len(robot_points) and keep.any():
        from scipy.spatial import cKDTree

        near, _ = cKDTree(robot_points).query(p[keep], k=1)
        idx = np.flatnonzero(keep.ravel())
        keep.ravel()[idx[near < ROBOT_CLEARANCE_M]] = False
    rgb01 = rgb.astype(np.float64) / 255.0
    target = np.asarray(COLOURS[colour])
    residual = colour_residual(rgb01, target)
    if flat:  # the table is everywhere at table height: only pixels of the colour itself
        keep &= residual < MAX_COLOUR_RESIDUAL
    pts, res = p[keep], residual[keep]
    eye_xy = np.linalg.inv(T_cam_from_world)[:2, 3]
    best: Seen | None = None
    for idx in _blobs(pts):
        blob_res = float(np.median(res[idx]))
        if blob_res > MAX_COLOUR_RESIDUAL or len(idx) < (2 if flat else 1):
            continue
        # Among the palette, the named colour must be the blob's nearest (red vs orange).
        mean = rgb01[keep][idx].mean(axis=0)
        if min(COLOURS, key=lambda n: float(colour_residual(mean, np.asarray(COLOURS[n])))) != colour:
            continue
        top = float(np.percentile(pts[idx, 2], 90))
        # The top face's centre: side faces seen at an angle pull a plain median towards the camera.
        face = idx if flat else idx[pts[idx, 2] >= top - TOP_FACE_M]
        xy = np.median(pts[face, :2], axis=0)
        if not flat:  # the far half of the object is hidden: its visible points sit nearer the camera
            away = xy - eye_xy
            xy = xy + VIEW_BIAS * max(top / 2.0, 0.01) * away / max(np.linalg.norm(away), 1e-9)
        seen = Seen(xy, top, len(idx), blob_res)
        if best is None or (seen.pixels, -seen.residual) > (best.pixels, -best.residual):
            best = seen
    return best
