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

from k4d.rotations import skew

from .model import JOINT_FIXED, JOINT_PRISMATIC, JOINT_REVOLUTE, KinematicTree, RobotModel


@dataclass(frozen=True, eq=False)
class FKPlan:
    """Per-model constants for FK (L = links in tree order, M = links below a moving joint)."""

    parent: tuple  # (L,) python ints: cheap to index in the hot loop
    moving_slot: tuple  # (L,) index into the M moving links, -1 below a fixed joint
    T_origin: np.ndarray  # (L, 4, 4)
    moving: np.ndarray  # (M,) link indices
    q_index: np.ndarray  # (M,) actuated joint driving each moving link
    multiplier: np.ndarray  # (M,)
    offset: np.ndarray  # (M,)
    R_origin: np.ndarray  # (M, 3, 3)
    R_origin_K: np.ndarray  # (M, 3, 3) R_o @ K (revolute; zero for prismatic)
    R_origin_K2: np.ndarray  # (M, 3, 3) R_o @ K @ K (revolute; zero for prismatic)
    t_origin: np.ndarray  # (M, 3)
    slide: np.ndarray  # (M, 3) R_o @ axis for prismatic joints, zero for revolute


@functools.lru_cache(maxsize=64)
def fk_plan(tree: KinematicTree) -> FKPlan:
    moving = np.flatnonzero(tree.joint_type != JOINT_FIXED)
    revolute = (tree.joint_type[moving] == JOINT_REVOLUTE)[:, None, None]
    prismatic = (tree.joint_type[moving] == JOINT_PRISMATIC)[:, None]
    K = skew(tree.axis[moving])
    R_o = tree.T_parent_from_joint[moving, :3, :3]
    slot = np.full(len(tree.parent), -1)
    slot[moving] = np.arange(len(moving))
    return FKPlan(
        parent=tuple(int(p) for p in tree.parent), moving_slot=tuple(int(s) for s in slot),
        T_origin=np.asarray(tree.T_parent_from_joint), moving=moving,
        q_index=tree.q_index[moving], multiplier=tree.q_multiplier[moving],
        offset=tree.q_offset[moving], R_origin=R_o.copy(),
        R_origin_K=np.where(revolute, R_o @ K, 0.0), R_origin_K2=np.where(revolute, R_o @ K @ K, 0.0),
        t_origin=tree.T_parent_from_joint[moving, :3, 3].copy(),
        slide=np.where(prismatic, np.einsum("mij,mj->mi", R_o, tree.axis[moving]), 0.0))


def forward_kinematics(model: RobotModel, joints: np.ndarray) -> np.ndarray:
    """Poses of every link in the base (root link) frame.

    joints: (T, J) or (J,) actuated joint values in `model.joint_names` order (radians/metres).
    Returns (T, L, 4, 4) (or (L, 4, 4) for a single configuration) float64,
    T_base_from_link, links in `model.link_names` order. Inputs are trusted (validate at
    the boundary with `k4d.robots.validation`).
    """
    q = np.asarray(joints, dtype=np.float64)
    single = q.ndim == 1
    q = q[None] if single else q
    world = link_poses(fk_plan(model.tree), q)
    out = world.transpose(1, 0, 2, 3)
    return out[0].copy() if single else np.ascontiguousarray(out)


def link_poses(plan: FKPlan, q: np.ndarray) -> np.ndarray:
    """(T, J) -> (L, T, 4, 4) T_base_from_link; link-major so each step writes contiguously.

    All joint motions are computed at once (M x T), then one batched 4x4 product per link
    walks the tree."""
    T, L = q.shape[0], len(plan.parent)
    value = (q[:, plan.q_index] * plan.multiplier + plan.offset).T  # (M, T)
    s = np.sin(value)[..., None, None]
    c = (1.0 - np.cos(value))[..., None, None]
    local = np.empty((len(plan.moving), T, 4, 4))
    local[:, :, :3, :3] = (plan.R_origin[:, None] + s * plan.R_origin_K[:, None]
                           + c * plan.R_origin_K2[:, None])
    local[:, :, :3, 3] = plan.t_origin[:, None] + value[..., None] * plan.slide[:, None]
    local[:, :, 3] = (0.0, 0.0, 0.0, 1.0)
    world = np.empty((L, T, 4, 4))
    world[0] = np.eye(4)
    for i in range(1, L):
        slot = plan.moving_slot[i]
        np.matmul(world[plan.parent[i]], plan.T_origin[i] if slot < 0 else local[slot],
                  out=world[i])
    return world


__all__ = ["FKPlan", "fk_plan", "forward_kinematics", "link_poses"]
