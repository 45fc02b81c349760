"""Camera rays and conservative per-link ray culling.

A link can only be hit by rays whose pixel-centre direction passes through the
projection of its convex hull. Casting only those rays (instead of the whole
image for every link) is what makes per-link static scenes fast. The culling
region is a k-DOP (polygon with `_DOP_DIRECTIONS` fixed edge normals) that
contains the projected hull, so results stay exact: a superset of the pixels the
link covers is cast. Everything is vectorised across frames.
"""

from __future__ import annotations

import numpy as np
from k4d.camera import Camera

_Z_EPS = 1e-6
_MARGIN_PX = 1.0  # widen every span so float rounding can never drop a boundary pixel
_DOP_DIRECTIONS = 16  # polygon edges; area excess over the true hull ~1 %


class PixelGrid:
    """Per-camera ray directions and lookup tables, shared by every link and frame."""

    def __init__(self, camera: Camera):
        self.camera = camera
        self.width, self.height = camera.width, camera.height
        self.distorted = camera.has_distortion
        # (H*W, 3) float32 camera-frame directions with z == 1 (hit distance == depth).
        self.directions = camera.ray_directions().reshape(-1, 3).astype(np.float32)
        self.unit_directions = (self.directions
                                / np.linalg.norm(self.directions, axis=1, keepdims=True))
        theta = 2.0 * np.pi * np.arange(_DOP_DIRECTIONS) / _DOP_DIRECTIONS
        self._dop_normals = np.stack([np.cos(theta), np.sin(theta)], axis=1)  # (D, 2)
        # Edges facing right bound x from above, edges facing left from below; the two
        # vertical normals only bound rows, which the row range already does.
        self._dop_right = self._dop_normals[:, 0] > 1e-6
        self._dop_left = self._dop_normals[:, 0] < -1e-6
        if self.distorted:
            grid = self.directions.reshape(self.height, self.width, 3)
            self._col_min, self._col_max = grid[..., 0].min(0), grid[..., 0].max(0)
            self._row_min, self._row_max = grid[..., 1].min(1), grid[..., 1].max(1)

    def candidate_pixels(self, hull_cam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """hull_cam (T, K, 3) convex-hull vertices of one link in the camera frame per frame.

        Returns (pixels, counts): pixels (N,) int64 flat indices into (T, H, W), frame by
        frame and ascending; counts (T,) number of pixels per frame.
        """
        T = hull_cam.shape[0]
        z = hull_cam[..., 2]
        behind = z.max(axis=1) <= _Z_EPS  # entirely behind the camera: no rays
        straddle = ~behind & (z.min(axis=1) <= _Z_EPS)  # crosses the image plane: all rays
        z_safe = np.where(z > _Z_EPS, z, 1.0)
        x_n, y_n = hull_cam[..., 0] / z_safe, hull_cam[..., 1] / z_safe
        if self.distorted:
            col_lo, col_hi = self._rectangles_distorted(x_n, y_n)
        else:
            cam = self.camera
            col_lo, col_hi = self._dop_spans(cam.cx + cam.fx * x_n, cam.cy + cam.fy * y_n)
        col_lo[behind] = self.width
        col_hi[behind] = -1
        col_lo[straddle] = 0
        col_hi[straddle] = self.width - 1
        counts_per_row = np.maximum(col_hi - col_lo + 1, 0)  # (T, H)
        row_start = (np.arange(T)[:, None] * self.height + np.arange(self.height)[None, :]) \
            * self.width + col_lo
        return (_spans_to_indices(row_start.ravel(), counts_per_row.ravel()),
                counts_per_row.sum(axis=1))

    def _dop_spans(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """u, v (T, K) projected hull points in pixels -> inclusive column span per row
        (T, H) of the k-DOP around them, widened by the margin; empty rows get lo > hi."""
        n = self._dop_normals
        # Support of the point set along each normal: (T, K, 2) @ (2, D) -> max over K.
        h = np.matmul(np.stack([u, v], axis=2), n.T).max(axis=1)  # (T, D)
        v_lo, v_hi = v.min(axis=1, keepdims=True), v.max(axis=1, keepdims=True)
        rows = np.arange(self.height, dtype=np.float64)[None, :]
        in_rows = (rows >= v_lo - _MARGIN_PX) & (rows <= v_hi + _MARGIN_PX)  # (T, H)
        y = np.clip(rows, v_lo, v_hi)[..., None]  # (T, H, 1)
        # cos * x + sin * y <= h  ->  x <= (h - sin y) / cos for cos > 0, >= for cos < 0
        right, left = self._dop_right, self._dop_left
        hi = ((h[:, None, right] - n[right, 1] * y) / n[right, 0]).min(axis=2)
        lo = ((h[:, None, left] - n[left, 1] * y) / n[left, 0]).max(axis=2)
        col_lo = np.clip(np.ceil(lo - _MARGIN_PX), 0, self.width).astype(np.int64)
        col_hi = np.clip(np.floor(hi + _MARGIN_PX), -1, self.width - 1).astype(np.int64)
        col_hi[~in_rows] = -1
        return col_lo, col_hi

    def _rectangles_distorted(self, x_n, y_n) -> tuple[np.ndarray, np.ndarray]:
        """With distortion the pixel grid is curved in normalised coordinates: per frame,
        take the pixel rectangle spanned by every column/row whose normalised range meets
        the hull's bounding box (conservative)."""
        T = x_n.shape[0]
        col_lo = np.full((T, self.height), self.width, np.int64)
        col_hi = np.full((T, self.height), -1, np.int64)
        for t in range(T):
            cols = np.flatnonzero((self._col_max >= x_n[t].min())
                                  & (self._col_min <= x_n[t].max()))
            rows = np.flatnonzero((self._row_max >= y_n[t].min())
                                  & (self._row_min <= y_n[t].max()))
            if len(cols) and len(rows):
                col_lo[t, rows[0]:rows[-1] + 1] = cols[0]
                col_hi[t, rows[0]:rows[-1] + 1] = cols[-1]
        return col_lo, col_hi


def _spans_to_indices(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Runs (start, count) -> concatenated ascending indices start..start+count-1."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)
