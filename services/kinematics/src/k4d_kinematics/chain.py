"""A serial chain (root -> one link) of a RobotModel, batched FK and geometric Jacobian.

The IK solvers work on the chain's variables (the actuated joints on the path from
the root to the target link). Fixed joints between them are folded into the joint
origins once, so the hot loop touches only the moving joints.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from k4d.errors import InvalidArgument
from k4d.robots.model import JOINT_FIXED, JOINT_PRISMATIC, RobotModel
from k4d.rotations import skew


@dataclass(frozen=True, eq=False)
class SerialChain:
    """Moving joints from the root to `link` (m of them), driven by n variables.

    variables: (n,) indices into the robot's actuated joint vector (IK unknowns).
    var_of_joint: (m,) which variable drives each chain joint; multiplier/offset: mimic map.
    T_origin: (m, 4, 4) parent-of-joint -> joint frame with preceding fixed joints folded in.
    T_tip: (4, 4) last moving joint -> link.
    R_K, R_K2: (m, 3, 3) R_o K and R_o K^2 (see fk.py); axis: (m, 3); prismatic: (m,) bool.
    """

    link: str
    variables: np.ndarray
    var_of_joint: np.ndarray
    multiplier: np.ndarray
    offset: np.ndarray
    T_origin: np.ndarray
    T_tip: np.ndarray
    R_K: np.ndarray
    R_K2: np.ndarray
    axis: np.ndarray
    prismatic: np.ndarray
    lower: np.ndarray  # (n,) variable limits
    upper: np.ndarray
    continuous: np.ndarray  # (n,) bool
    mixing: np.ndarray | None  # (m, n) d(joint)/d(variable) when it is not the identity

    @property
    def num_variables(self) -> int:
        return len(self.variables)


def build_chain(model: RobotModel, link: str | None = None) -> SerialChain:
    """The chain from the root to `link` (default: the end effector); cached per model."""
    return _build_chain(model, link or model.ee_link)


@functools.lru_cache(maxsize=128)
def _build_chain(model: RobotModel, link: str) -> SerialChain:
    tree = model.tree
    path = []
    index = model.link_index(link)
    while index > 0:
        path.append(index)
        index = int(tree.parent[index])
    path.reverse()
    moving = [i for i in path if tree.joint_type[i] != JOINT_FIXED]
    if not moving:
        raise InvalidArgument.for_field("link", f"link {link!r} does not move with any joint")
    variables = sorted({int(tree.q_index[i]) for i in moving})
    var_pos = {v: k for k, v in enumerate(variables)}
    T_origin, pending = [], np.eye(4)
    for i in path:
        if tree.joint_type[i] == JOINT_FIXED:
            pending = pending @ tree.T_parent_from_joint[i]
        else:
            T_origin.append(pending @ tree.T_parent_from_joint[i])
            pending = np.eye(4)
    T_origin = np.array(T_origin)
    axis = tree.axis[moving]
    K = skew(axis)
    R_o = T_origin[:, :3, :3]
    var_of_joint = np.array([var_pos[int(tree.q_index[i])] for i in moving])
    multiplier = tree.q_multiplier[moving].astype(np.float64)
    mixing = None
    # Also when the variables are not in chain order: a mimic joint on the chain driven by
    # an actuated joint elsewhere in the tree takes that joint's (later) index.
    if (len(moving) != len(variables) or np.any(multiplier != 1.0)
            or np.any(var_of_joint != np.arange(len(moving)))):
        mixing = np.zeros((len(moving), len(variables)))
        mixing[np.arange(len(moving)), var_of_joint] = multiplier
    return SerialChain(
        link=link, variables=np.array(variables), var_of_joint=var_of_joint,
        multiplier=multiplier, offset=tree.q_offset[moving].astype(np.float64),
        T_origin=T_origin, T_tip=pending, R_K=R_o @ K, R_K2=R_o @ K @ K, axis=axis,
        prismatic=tree.joint_type[moving] == JOINT_PRISMATIC,
        lower=model.lower[variables].copy(), upper=model.upper[variables].copy(),
        continuous=model.continuous[variables].copy(), mixing=mixing)


def chain_fk(chain: SerialChain, x: np.ndarray):
    """x: (B, n) chain variables -> (frames (B, m, 4, 4) after each moving joint,
    T_base_from_link (B, 4, 4))."""
    B, m = x.shape[0], len(chain.T_origin)
    theta = x[:, chain.var_of_joint] * chain.multiplier + chain.offset  # (B, m)
    local = np.empty((B, m, 4, 4))
    local[:, :, 3, :] = (0.0, 0.0, 0.0, 1.0)
    s = np.sin(theta)[..., None, None]
    c = 1.0 - np.cos(theta)[..., None, None]
    R_o = chain.T_origin[:, :3, :3]
    local[:, :, :3, :3] = R_o + s * chain.R_K + c * chain.R_K2
    local[:, :, :3, 3] = chain.T_origin[:, :3, 3]
    if chain.prismatic.any():
        p = chain.prismatic
        local[:, p, :3, :3] = R_o[p]
        local[:, p, :3, 3] += theta[:, p, None] * np.einsum("mij,mj->mi", R_o[p], chain.axis[p])
    frames = np.empty_like(local)
    frames[:, 0] = local[:, 0]
    for j in range(1, m):
        np.matmul(frames[:, j - 1], local[:, j], out=frames[:, j])
    return frames, frames[:, -1] @ chain.T_tip


def chain_jacobian(chain: SerialChain, frames: np.ndarray, T_link: np.ndarray) -> np.ndarray:
    """Geometric Jacobian (B, 6, n) of the link origin in the base frame: rows (v; omega)."""
    z = np.einsum("bmij,mj->bmi", frames[:, :, :3, :3], chain.axis)  # joint axes, base frame
    d = T_link[:, None, :3, 3] - frames[:, :, :3, 3]
    J = np.empty((frames.shape[0], 6, z.shape[1]))
    J[:, 0] = z[..., 1] * d[..., 2] - z[..., 2] * d[..., 1]
    J[:, 1] = z[..., 2] * d[..., 0] - z[..., 0] * d[..., 2]
    J[:, 2] = z[..., 0] * d[..., 1] - z[..., 1] * d[..., 0]
    J[:, 3:] = np.swapaxes(z, 1, 2)
    if chain.prismatic.any():
        p = chain.prismatic
        J[:, :3, p] = np.swapaxes(z[:, p], 1, 2)
        J[:, 3:, p] = 0.0
    if chain.mixing is not None:
        J = J @ chain.mixing
    return J


class ChainWorkspace:
    """Preallocated buffers for unbatched FK/Jacobian of one chain (the pinocchio
    `Data` idea): the IK inner loop reuses them instead of allocating each iteration."""

    def __init__(self, chain: SerialChain):
        m = len(chain.T_origin)
        self.chain = chain
        self.local = np.array(chain.T_origin)
        self.frames = np.empty((m, 4, 4))
        self.R_o = chain.T_origin[:, :3, :3].copy()
        self.t_o = chain.T_origin[:, :3, 3].copy()
        self.prism_dir = np.einsum("mij,mj->mi", self.R_o, chain.axis)
        self.identity_map = chain.mixing is None and not np.any(chain.offset)
        self.J = np.empty((6, chain.num_variables if chain.mixing is None else m))

    def fk(self, x: np.ndarray) -> np.ndarray:
        """x: (n,) -> T_base_from_link (4, 4); fills self.frames (m, 4, 4)."""
        chain, local, frames = self.chain, self.local, self.frames
        theta = x if self.identity_map else x[chain.var_of_joint] * chain.multiplier + chain.offset
        s = np.sin(theta)[:, None, None]
        c = 1.0 - np.cos(theta)[:, None, None]
        local[:, :3, :3] = self.R_o + s * chain.R_K + c * chain.R_K2
        if chain.prismatic.any():
            p = chain.prismatic
            local[p, :3, :3] = self.R_o[p]
            local[p, :3, 3] = self.t_o[p] + theta[p, None] * self.prism_dir[p]
        frames[0] = local[0]
        for j in range(1, len(local)):
            np.matmul(frames[j - 1], local[j], out=frames[j])
        return frames[-1] @ chain.T_tip

    def jacobian(self, T_link: np.ndarray) -> np.ndarray:
        """Geometric Jacobian (6, n) at the configuration of the last `fk` call."""
        chain, frames, J = self.chain, self.frames, self.J
        z = (frames[:, :3, :3] @ chain.axis[:, :, None])[:, :, 0]  # (m, 3) axes, base frame
        d = T_link[:3, 3] - frames[:, :3, 3]
        J[0] = z[:, 1] * d[:, 2] - z[:, 2] * d[:, 1]
        J[1] = z[:, 2] * d[:, 0] - z[:, 0] * d[:, 2]
        J[2] = z[:, 0] * d[:, 1] - z[:, 1] * d[:, 0]
        J[3:] = z.T
        if chain.prismatic.any():
            p = chain.prismatic
            J[:3, p] = z[p].T
            J[3:, p] = 0.0
        return J if chain.mixing is None else J @ chain.mixing
