"""The 8-bit Kinema4D pointmap codec (one definition for the whole repo).

8-bit Kinema4D form (REFERENCE section 2, the recipe inherited from 4DNeX): points
go to the FIRST frame's camera coordinates; per frame, each axis is clipped to the
2nd/98th percentile of the masked points; the clip box centre and ONE isotropic
scale (half the largest side) map it to [-1, 1]; stored as uint8 (p + 1) * 127.5.
Unlike the official data we keep the per-frame centre (T, 3) and scale (T,), so
metric XYZ comes back with an error of at most scale / 255 per axis for points
inside the clip box. Pixels off the mask are stored as 0 (black), as in the
robot-only videos; the mask travels with the encoding and is authoritative.

Lossless form: float32 metric pointmap (exact; 0 off the mask) or float16 of the same
normalised coordinates, unclipped, metric = q * scale + centre (error <= 2**-11 * scale
* max(|q|, 1) per axis; NaN off the mask).

Pure numpy; the projection service (files, gRPC), the simulator's outputs and the
Robo4D-200k layout (k4d.episodes.robo4d) all use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from k4d.errors import InvalidArgument


def invert_rigid(T: np.ndarray) -> np.ndarray:
    """Inverse of rigid transforms (..., 4, 4)."""
    T = np.asarray(T, np.float64)
    out = np.zeros_like(T)
    R_t = np.swapaxes(T[..., :3, :3], -1, -2)
    out[..., :3, :3] = R_t
    out[..., :3, 3] = -np.einsum("...ij,...j->...i", R_t, T[..., :3, 3])
    out[..., 3, 3] = 1.0
    return out


FORMAT_8BIT = "k4d.pointmap.u8"
FORMAT_LOSSLESS = "k4d.pointmap.float"
FORMAT_VERSION = "1"
CLIP_PERCENTILES = (2.0, 98.0)
_MIN_SCALE = 1e-6


@dataclass
class EncodedPointmap:
    """A pointmap sequence in the first frame's camera coordinates, normalised per frame.

    values: (T, H, W, 3) uint8 (8-bit form) or float16/float32 (lossless form);
    centre: (T, 3) float64 metres, scale: (T,) float64 metres (p_cam0 = q * scale + centre);
    mask: (T, H, W) bool; T_cam0_from_cam: (T, 4, 4) float64 (identity for a static camera).
    """

    values: np.ndarray
    centre: np.ndarray
    scale: np.ndarray
    mask: np.ndarray
    T_cam0_from_cam: np.ndarray

    @property
    def is_8bit(self) -> bool:
        return self.values.dtype == np.uint8


def _check_inputs(pointmap, mask, T_world_from_cam):
    pointmap = np.asarray(pointmap)
    mask = np.asarray(mask)
    if pointmap.ndim != 4 or pointmap.shape[-1] != 3:
        raise InvalidArgument.for_field("pointmap", f"expected (T, H, W, 3), got {pointmap.shape}")
    if mask.shape != pointmap.shape[:3]:
        raise InvalidArgument.for_field("mask", f"expected {pointmap.shape[:3]}, got {mask.shape}")
    pointmap = pointmap.astype(np.float64)
    mask = mask.astype(bool)
    if not np.all(np.isfinite(pointmap[mask])):
        raise InvalidArgument.for_field("pointmap", "masked points must be finite")
    T = pointmap.shape[0]
    if T_world_from_cam is None:
        T_cam0_from_cam = np.broadcast_to(np.eye(4), (T, 4, 4)).copy()
    else:
        T_world_from_cam = np.asarray(T_world_from_cam, np.float64)
        if T_world_from_cam.shape != (T, 4, 4) or not np.all(np.isfinite(T_world_from_cam)):
            raise InvalidArgument.for_field("camera_poses", f"expected finite ({T}, 4, 4)")
        T_cam0_from_cam = invert_rigid(T_world_from_cam[0])[None] @ T_world_from_cam
    return pointmap, mask, T_cam0_from_cam


def normalise(pointmap, mask, T_world_from_cam=None, percentiles=CLIP_PERCENTILES):
    """-> (q (T, H, W, 3) float64 in [-1, 1] on the mask (0 elsewhere), centre, scale,
    mask, T_cam0_from_cam). `T_world_from_cam` (T, 4, 4) moves a moving camera's points
    into the first frame's camera; None = static camera."""
    pointmap, mask, T_cam0_from_cam = _check_inputs(pointmap, mask, T_world_from_cam)
    T = pointmap.shape[0]
    q = np.zeros_like(pointmap)
    centre = np.zeros((T, 3))
    scale = np.ones(T)
    for t in range(T):
        p = pointmap[t][mask[t]]  # (N, 3)
        if len(p) == 0:
            continue
        R, tr = T_cam0_from_cam[t, :3, :3], T_cam0_from_cam[t, :3, 3]
        p = p @ R.T + tr
        lo, hi = np.percentile(p, percentiles, axis=0)
        centre[t] = (lo + hi) / 2.0
        scale[t] = max(float((hi - lo).max()) / 2.0, _MIN_SCALE)
        q[t][mask[t]] = (np.clip(p, lo, hi) - centre[t]) / scale[t]
    return q, centre, scale, mask, T_cam0_from_cam


def encode_8bit(pointmap, mask, T_world_from_cam=None,
                percentiles=CLIP_PERCENTILES) -> EncodedPointmap:
    """Metric camera-frame pointmap (T, H, W, 3) + mask -> Kinema4D 8-bit form."""
    _check_percentiles(percentiles)
    q, centre, scale, mask, T_cam0_from_cam = normalise(pointmap, mask, T_world_from_cam,
                                                        percentiles)
    values = np.clip(np.rint((q + 1.0) * 127.5), 0, 255).astype(np.uint8)
    values[~mask] = 0
    return EncodedPointmap(values, centre, scale, mask, T_cam0_from_cam)


def encode_lossless(pointmap, mask, T_world_from_cam=None, *, dtype="float32",
                    percentiles=CLIP_PERCENTILES) -> EncodedPointmap:
    """float32: the metric points themselves (in first-frame camera coordinates, exact).
    float16: normalised unclipped coordinates (p - centre) / scale as float16, NaN off
    the mask (0 is a valid normalised point)."""
    if dtype not in ("float16", "float32"):
        raise InvalidArgument.for_field("dtype", "must be float16 or float32")
    _check_percentiles(percentiles)
    _, centre, scale, mask, T_cam0_from_cam = normalise(pointmap, mask, T_world_from_cam,
                                                        percentiles)
    p_cam0 = _to_cam0(np.asarray(pointmap, np.float64), mask, T_cam0_from_cam)
    if dtype == "float32":
        values = p_cam0.astype(np.float32)
    else:
        q = (p_cam0 - centre[:, None, None, :]) / scale[:, None, None, None]
        q[~mask] = np.nan
        values = q.astype(np.float16)
    return EncodedPointmap(values, centre, scale, mask, T_cam0_from_cam)


def decode(encoded: EncodedPointmap, frame: str = "camera") -> np.ndarray:
    """-> metric pointmap (T, H, W, 3) float32, zeros off the mask, in each frame's OWN
    camera coordinates (frame="camera") or the first frame's (frame="first_camera")."""
    if frame not in ("camera", "first_camera"):
        raise InvalidArgument.for_field("frame", "must be 'camera' or 'first_camera'")
    v = encoded.values
    if v.dtype == np.uint8:
        q = v.astype(np.float64) / 127.5 - 1.0
        p_cam0 = q * encoded.scale[:, None, None, None] + encoded.centre[:, None, None, :]
    elif v.dtype == np.float16:
        p_cam0 = v.astype(np.float64) * encoded.scale[:, None, None, None] \
            + encoded.centre[:, None, None, :]
    else:
        p_cam0 = v.astype(np.float64)
    if frame == "first_camera":
        p = p_cam0
    else:
        T_cam_from_cam0 = invert_rigid(encoded.T_cam0_from_cam)
        p = np.einsum("tij,thwj->thwi", T_cam_from_cam0[:, :3, :3], p_cam0) \
            + T_cam_from_cam0[:, None, None, :3, 3]
    p[~encoded.mask] = 0.0
    return p.astype(np.float32)


def mask_from_values(values: np.ndarray) -> np.ndarray:
    """Recover the mask from encoded values alone (T, H, W): 8-bit and float32 store
    exact zeros (black) off the robot, float16 stores NaN."""
    if values.dtype == np.float16:
        return np.all(np.isfinite(values), axis=-1)
    return np.any(values != 0, axis=-1)


def _check_percentiles(percentiles) -> None:
    lo, hi = (float(p) for p in percentiles)
    if not (0.0 <= lo < hi <= 100.0):
        raise InvalidArgument.for_field("clip_percentiles",
                                        f"need 0 <= low < high <= 100, got {lo}, {hi}")


def quantisation_step(encoded: EncodedPointmap) -> np.ndarray:
    """(T,) metres: the largest per-axis round-trip error of the 8-bit form for points
    inside the clip box (half of one uint8 step, scale * 2 / 255 / 2), along the first
    frame's camera axes; in another frame's axes the error norm is <= sqrt(3) times it."""
    return encoded.scale / 255.0


def _to_cam0(pointmap, mask, T_cam0_from_cam):
    p = np.einsum("tij,thwj->thwi", T_cam0_from_cam[:, :3, :3], pointmap) \
        + T_cam0_from_cam[:, None, None, :3, 3]
    p[~mask] = 0.0
    return p
