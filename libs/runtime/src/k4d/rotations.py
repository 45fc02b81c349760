"""Rotations and rigid transforms, one module for the repo (issue 9 point 11): the URDF
loader, FK, IK, actions, cameras and the action proto conversion all use these.

All functions take and return float64 numpy arrays; batched variants accept a
leading batch axis. Quaternions are (x, y, z, w). Euler "xyz" is extrinsic (fixed axes),
the URDF roll-pitch-yaw convention: R = Rz(yaw) @ Ry(pitch) @ Rx(roll).
"""

from __future__ import annotations

import numpy as np


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF fixed-axis roll-pitch-yaw: R = Rz(yaw) @ Ry(pitch) @ Rx(roll). Returns (3, 3)."""
    roll, pitch, yaw = (float(v) for v in rpy)
    cr, sr = np.cos(roll), np.sin(roll)
    cp, sp = np.cos(pitch), np.sin(pitch)
    cy, sy = np.cos(yaw), np.sin(yaw)
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def euler_xyz_to_matrix(euler) -> np.ndarray:
    """Extrinsic x-y-z Euler angles (rad) -> (3, 3); the same convention as URDF rpy."""
    return rpy_to_matrix(euler)


def make_transform(rotation: np.ndarray, translation) -> np.ndarray:
    """(3, 3) rotation + (3,) translation -> (4, 4) homogeneous transform."""
    T = np.eye(4)
    T[:3, :3] = rotation
    T[:3, 3] = translation
    return T


def skew(v: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 3) cross-product matrix."""
    v = np.asarray(v, dtype=np.float64)
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def so3_log(R: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) -> rotation vectors (..., 3), robust near 0 and pi."""
    R = np.asarray(R, dtype=np.float64)
    vee = np.stack([R[..., 2, 1] - R[..., 1, 2],
                    R[..., 0, 2] - R[..., 2, 0],
                    R[..., 1, 0] - R[..., 0, 1]], axis=-1)
    sin_theta = 0.5 * np.linalg.norm(vee, axis=-1)
    cos_theta = 0.5 * (R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2] - 1.0)
    # atan2 keeps full precision near 0 and pi, where arccos loses half the digits.
    theta = np.arctan2(sin_theta, cos_theta)
    small = theta < 1e-6
    factor = np.where(small, 0.5 + theta**2 / 12.0,
                      theta / (2.0 * np.where(small, 1.0, sin_theta)))
    out = factor[..., None] * vee
    near_pi = theta > np.pi - 1e-4
    if np.any(near_pi):
        out[near_pi] = _so3_log_near_pi(R[near_pi], theta[near_pi], vee[near_pi])
    return out


def _so3_log_near_pi(R: np.ndarray, theta: np.ndarray, vee: np.ndarray) -> np.ndarray:
    """(K, 3, 3) -> (K, 3). Near pi the antisymmetric part vanishes; recover the axis from
    the symmetric part, B = cos(theta) I + (1 - cos(theta)) a a^T, the sign from `vee`."""
    cos_theta = np.cos(theta)[:, None, None]
    aaT = ((R + np.swapaxes(R, -1, -2)) / 2.0 - cos_theta * np.eye(3)) / (1.0 - cos_theta)
    diag = np.stack([aaT[:, 0, 0], aaT[:, 1, 1], aaT[:, 2, 2]], axis=-1)
    k = np.argmax(diag, axis=-1)
    rows = np.arange(len(k))
    axis = aaT[rows, k] / np.sqrt(np.maximum(diag[rows, k], 1e-300))[:, None]
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    sign = np.where(np.sum(vee * axis, axis=-1) < 0, -1.0, 1.0)
    return axis * (theta * sign)[:, None]


def so3_exp(rotvec: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) -> rotation matrices (..., 3, 3) (Rodrigues)."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    theta = np.linalg.norm(rotvec, axis=-1)
    small = theta < 1e-8
    safe = np.where(small, 1.0, theta)
    a = np.where(small, 1.0 - theta**2 / 6.0, np.sin(theta) / safe)
    b = np.where(small, 0.5 - theta**2 / 24.0, (1.0 - np.cos(theta)) / safe**2)
    K = skew(rotvec)
    eye = np.broadcast_to(np.eye(3), K.shape)
    return eye + a[..., None, None] * K + b[..., None, None] * (K @ K)


def pose_error(T_target: np.ndarray, T_current: np.ndarray):
    """Position error (..., 3) in the base frame and rotation error (..., 3) as the base-frame
    rotation vector taking the current orientation to the target one."""
    dp = T_target[..., :3, 3] - T_current[..., :3, 3]
    R_err = T_target[..., :3, :3] @ np.swapaxes(T_current[..., :3, :3], -1, -2)
    return dp, so3_log(R_err)


def quat_to_matrix(quat_xyzw: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions (x, y, z, w) -> (..., 3, 3)."""
    q = np.asarray(quat_xyzw, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=-1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=-1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=-1),
    ], axis=-2)


def rotvec_to_quat_xyzw(rotvec: np.ndarray) -> np.ndarray:
    """(..., 3) rotation vectors (rad) -> (..., 4) unit quaternions (x, y, z, w); w >= 0 for angles up to pi."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    # sin(a/2)/a -> 1/2 as a -> 0 (series), keeps tiny rotations exact
    half_sinc = np.where(angle > 1e-8, np.sin(angle / 2) / np.maximum(angle, 1e-300),
                         0.5 - angle**2 / 48)
    return np.concatenate([rotvec * half_sinc, np.cos(angle / 2)], axis=-1)


def quat_xyzw_to_rotvec(quat_xyzw: np.ndarray) -> np.ndarray:
    """(..., 4) quaternions (x, y, z, w) -> (..., 3) rotation vectors, angle in [0, pi]."""
    q = np.asarray(quat_xyzw, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    q = np.where(q[..., 3:4] < 0, -q, q)  # q and -q are one rotation; take w >= 0
    sin_half = np.linalg.norm(q[..., :3], axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(sin_half, q[..., 3:4])
    factor = np.where(sin_half > 1e-12, angle / np.maximum(sin_half, 1e-300), 2.0)
    return q[..., :3] * factor


def orthonormality_error(R: np.ndarray) -> np.ndarray:
    """(..., 3, 3) -> (...,) max |R^T R - I| plus |det R - 1|: 0 for a proper rotation."""
    RtR = np.swapaxes(R, -1, -2) @ R
    ortho = np.abs(RtR - np.eye(3)).max(axis=(-1, -2))
    return ortho + np.abs(np.linalg.det(R) - 1.0)
