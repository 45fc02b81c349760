"""Full-tree forward kinematics, vectorised over frames.

`forward_kinematics(model, joints)` walks the links once in tree order; each step
is a handful of numpy operations over all T frames at once (no per-frame Python
loop). Per-joint constants are precomputed once per model (`FKPlan`): for a
revolute joint with origin rotation R_o and axis skew matrix K,

    R_parent_from_child(q) = R_o (I + sin q K + (1 - cos q) K^2)
                           = R_o + sin q (R_o K) + (1 - cos q) (R_o K^2),

so a joint costs two scaled adds and one batched 4x4 product.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .model import JOINT_FIXED, JOINT_PRISMATIC, JOINT_REVOLUTE, KinematicTree, RobotModel
from .transforms import skew


@dataclass(frozen=True, eq=False)
class FKPlan:
    """Per-model constants for FK (L = links, tree order)."""

    parent: tuple  # (L,) python ints: cheap to index in the hot loop
    kind: tuple  # (L,) JOINT_* codes
    q_index: tuple
    multiplier: np.ndarray  # (L,)
    offset: np.ndarray  # (L,)
    T_origin: np.ndarray  # (L, 4, 4)
    R_origin: np.ndarray  # (L, 3, 3)
    R_origin_K: np.ndarray  # (L, 3, 3) R_o @ K (revolute)
    R_origin_K2: np.ndarray  # (L, 3, 3) R_o @ K @ K (revolute)
    axis_parent: np.ndarray  # (L, 3) R_o @ axis (prismatic direction in the parent frame)


@functools.lru_cache(maxsize=64)
def fk_plan(tree: KinematicTree) -> FKPlan:
    K = skew(tree.axis)
    R_o = tree.T_parent_from_joint[:, :3, :3]
    return FKPlan(
        parent=tuple(int(p) for p in tree.parent), kind=tuple(int(k) for k in tree.joint_type),
        q_index=tuple(int(i) for i in tree.q_index), multiplier=np.asarray(tree.q_multiplier),
        offset=np.asarray(tree.q_offset), T_origin=np.asarray(tree.T_parent_from_joint),
        R_origin=R_o.copy(), R_origin_K=R_o @ K, R_origin_K2=R_o @ K @ K,
        axis_parent=np.einsum("lij,lj->li", R_o, tree.axis))


def forward_kinematics(model: RobotModel, joints: np.ndarray) -> np.ndarray:
    """Poses of every link in the base (root link) frame.

    joints: (T, J) or (J,) actuated joint values in `model.joint_names` order (radians/metres).
    Returns (T, L, 4, 4) (or (L, 4, 4) for a single configuration) float64,
    T_base_from_link, links in `model.link_names` order. Inputs are trusted (validate at
    the boundary with `k4d_kinematics.validation`).
    """
    q = np.asarray(joints, dtype=np.float64)
    single = q.ndim == 1
    q = q[None] if single else q
    world = link_poses(fk_plan(model.tree), q)
    out = world.transpose(1, 0, 2, 3)
    return out[0].copy() if single else np.ascontiguousarray(out)


def link_poses(plan: FKPlan, q: np.ndarray) -> np.ndarray:
    """(T, J) -> (L, T, 4, 4) T_base_from_link; link-major so each step writes contiguously."""
    T = q.shape[0]
    L = len(plan.parent)
    world = np.empty((L, T, 4, 4))
    world[0] = np.eye(4)
    local = np.zeros((T, 4, 4))
    local[:, 3, 3] = 1.0
    for i in range(1, L):
        kind, parent = plan.kind[i], plan.parent[i]
        if kind == JOINT_FIXED:
            np.matmul(world[parent], plan.T_origin[i], out=world[i])
            continue
        value = q[:, plan.q_index[i]] * plan.multiplier[i] + plan.offset[i]
        if kind == JOINT_REVOLUTE:
            s = np.sin(value)[:, None, None]
            c = (1.0 - np.cos(value))[:, None, None]
            local[:, :3, :3] = plan.R_origin[i] + s * plan.R_origin_K[i] + c * plan.R_origin_K2[i]
            local[:, :3, 3] = plan.T_origin[i, :3, 3]
        elif kind == JOINT_PRISMATIC:
            local[:, :3, :3] = plan.R_origin[i]
            local[:, :3, 3] = plan.T_origin[i, :3, 3] + value[:, None] * plan.axis_parent[i]
        np.matmul(world[parent], local, out=world[i])
    return world


__all__ = ["FKPlan", "JOINT_REVOLUTE", "fk_plan", "forward_kinematics", "link_poses"]
