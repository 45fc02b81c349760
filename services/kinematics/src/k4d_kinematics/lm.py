"""Levenberg-Marquardt on the SE(3) pose error of a serial chain.

Damping follows Sugihara (2011): lambda = E + w_bar with E = 0.5 e^T W e, which is large
far from the target (gradient-like steps) and tends to w_bar near it (Gauss-Newton).
A step that raises the error is rejected and the extra damping grows tenfold. Steps are
projected onto the joint limits (continuous joints are wrapped instead), so every iterate
and the result lie within limits. A solve whose error stops improving returns early so
the caller can restart it from another seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from k4d.rotations import pose_error, so3_log

from .chain import ChainWorkspace, SerialChain, chain_fk


@dataclass(frozen=True)
class LMSettings:
    position_tolerance: float = 1e-4  # metres
    rotation_tolerance: float = 1e-3  # radians
    rotation_weight: float = 0.2  # metres per radian in the least-squares cost
    w_bar: float = 1e-4
    max_iterations: int = 50
    stall_iterations: int = 5  # iterations without 1% progress before a solve is "stuck"


def pose_residual(chain: SerialChain, T_target: np.ndarray, x: np.ndarray):
    """-> (frames, T_link, e (B, 6) = (dp; dw) in the base frame)."""
    frames, T_link = chain_fk(chain, x)
    return frames, T_link, np.concatenate(pose_error(T_target, T_link), axis=-1)


def clamp_to_limits(chain: SerialChain, x: np.ndarray) -> np.ndarray:
    if chain.continuous.any():
        wrapped = np.mod(x + np.pi, 2 * np.pi) - np.pi
        x = np.where(chain.continuous, wrapped, x)
    return np.clip(x, chain.lower, chain.upper)


def _rotation_error(R_err: np.ndarray) -> tuple[float, float, float]:
    """so3_log of one 3x3 matrix with scalar math (the batched version costs ~20 us)."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = R_err.ravel().tolist()
    vx, vy, vz = r21 - r12, r02 - r20, r10 - r01
    sin_theta = 0.5 * math.sqrt(vx * vx + vy * vy + vz * vz)
    theta = math.atan2(sin_theta, 0.5 * (r00 + r11 + r22 - 1.0))
    if theta > math.pi - 1e-4:
        return tuple(so3_log(R_err).tolist())
    factor = 0.5 + theta * theta / 12.0 if theta < 1e-6 else theta / (2.0 * sin_theta)
    return factor * vx, factor * vy, factor * vz


def _projected_step(chain: SerialChain, x, A, g, dx):
    """Clamp joints the step pushes past a limit onto it and re-solve the others for the
    rest of the step (a projected Newton step): plain clamping alone stalls along limits."""
    x_new = x + dx
    blocked = (x_new < chain.lower) | (x_new > chain.upper)
    if blocked.any() and not blocked.all():
        dx_b = np.clip(x_new[blocked], chain.lower[blocked], chain.upper[blocked]) - x[blocked]
        free = ~blocked
        rhs = g[free] - A[np.ix_(free, blocked)] @ dx_b
        dx = dx.copy()
        dx[blocked], dx[free] = dx_b, np.linalg.solve(A[np.ix_(free, free)], rhs)
        x_new = x + dx
    return clamp_to_limits(chain, x_new)


def solve_one(workspace: ChainWorkspace, T_target: np.ndarray, x0: np.ndarray,
              settings: LMSettings):
    """Unbatched solve_lm for latency: T_target (4, 4), x0 (n,). Returns
    (x (n,), converged, position_error, rotation_error, iterations)."""
    chain = workspace.chain
    w_rot = settings.rotation_weight ** 2
    weights = np.array([1.0, 1.0, 1.0, w_rot, w_rot, w_rot])
    p_target, R_target = T_target[:3, 3], T_target[:3, :3]
    tol_p2, tol_r2 = settings.position_tolerance ** 2, settings.rotation_tolerance ** 2

    def residual(x):
        T_link = workspace.fk(x)
        dx, dy, dz = (p_target - T_link[:3, 3]).tolist()
        wx, wy, wz = _rotation_error(R_target @ T_link[:3, :3].T)
        p2, r2 = dx * dx + dy * dy + dz * dz, wx * wx + wy * wy + wz * wz
        return T_link, np.array([dx, dy, dz, wx, wy, wz]), p2, r2, 0.5 * (p2 + w_rot * r2)

    x = clamp_to_limits(chain, np.array(x0, dtype=np.float64))
    T_link, e, p2, r2, cost = residual(x)
    extra, best, stall, iterations = 0.0, cost, 0, 0
    n = x.shape[0]
    diag = np.arange(n)
    while iterations < settings.max_iterations and stall < settings.stall_iterations:
        if p2 <= tol_p2 and r2 <= tol_r2:
            break
        iterations += 1
        J = workspace.jacobian(T_link)
        JtW = J.T * weights
        A = JtW @ J
        A[diag, diag] += (cost + settings.w_bar) * (1.0 + extra)
        g = JtW @ e
        x_new = _projected_step(chain, x, A, g, np.linalg.solve(A, g))
        T_new, e_new, p2_new, r2_new, cost_new = residual(x_new)
        if cost_new < cost:
            x, T_link, e, p2, r2, cost, extra = x_new, T_new, e_new, p2_new, r2_new, cost_new, 0.0
        else:
            extra = max(extra * 10.0, 1.0)
            # The rejected step moved the workspace frames: restore them for the Jacobian.
            T_link = workspace.fk(x)
        if cost < 0.99 * best:
            best, stall = cost, 0
        else:
            stall += 1
    converged = p2 <= tol_p2 and r2 <= tol_r2
    return x, converged, math.sqrt(p2), math.sqrt(r2), iterations
