"""Inverse kinematics for the arm chain of a robot.

Two solvers behind one function, `solve_ik`:
- "ours" (default): Levenberg-Marquardt on the SE(3) log error with the analytic
  geometric Jacobian (`lm.py`), iterates clamped to joint limits, random restarts
  within limits when a solve stalls, a per-frame time budget.
- "ikpy": the `ikpy` package, configured correctly (explicit chain path, an active
  mask covering exactly the chain's actuated joints, a seed inside the limits).

Modes: "trajectory" seeds frame t with the solution of frame t-1 (continuity, warm
start); "independent" seeds every frame with `seed`. Every returned configuration
lies within joint limits; frames that miss the tolerance have success=False and
their residuals reported (the closest configuration found is returned).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from k4d.errors import InvalidArgument
from k4d.robots.model import RobotModel

from .chain import ChainWorkspace, SerialChain, build_chain
from .lm import LMSettings, pose_residual, solve_one

SOLVERS = ("ours", "ikpy")
MODES = ("trajectory", "independent")


@dataclass(frozen=True)
class IKOptions:
    position_tolerance: float = 1e-4  # metres
    rotation_tolerance: float = 1e-3  # radians
    max_iterations: int = 50  # per attempt
    stall_iterations: int = 5
    max_restarts: int = 200  # random restarts per frame after the seeded attempt
    timeout_s: float = 0.5  # per frame, checked between attempts
    # Trajectory frames after the first: restarts jump between IK branches anyway, so an
    # unreachable stretch of a trajectory should not cost timeout_s per frame.
    trajectory_timeout_s: float = 0.05
    rotation_weight: float = 0.2  # metres per radian in the cost
    random_seed: int = 0  # restarts are reproducible

    def lm_settings(self) -> LMSettings:
        return LMSettings(position_tolerance=self.position_tolerance,
                          rotation_tolerance=self.rotation_tolerance,
                          rotation_weight=self.rotation_weight,
                          max_iterations=self.max_iterations,
                          stall_iterations=self.stall_iterations)


@dataclass
class IKResult:
    """Per-frame results (T frames, J actuated joints of the robot)."""

    joints: np.ndarray  # (T, J) full joint vectors (non-chain joints copied from the seed)
    success: np.ndarray  # (T,) bool
    position_error: np.ndarray  # (T,) metres
    rotation_error: np.ndarray  # (T,) radians
    iterations: np.ndarray  # (T,) LM iterations (all attempts)
    restarts: np.ndarray  # (T,)
    solve_time_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (T,)


def solve_ik(model: RobotModel, targets: np.ndarray, *, link: str | None = None,
             seed: np.ndarray | None = None, mode: str = "trajectory", solver: str = "ours",
             options: IKOptions | None = None) -> IKResult:
    """targets: (T, 4, 4) T_base_from_link (validated: finite, proper rotations).
    seed: (J,) within limits, default the middle of the joint ranges."""
    if solver not in SOLVERS:
        raise InvalidArgument.for_field("solver", f"unknown solver {solver!r}; one of {SOLVERS}")
    if mode not in MODES:
        raise InvalidArgument.for_field("mode", f"unknown mode {mode!r}; one of {MODES}")
    options = options or IKOptions()
    chain = build_chain(model, link)
    seed = model.mid_configuration if seed is None else np.asarray(seed, dtype=np.float64)
    frame_solver = (_OurFrameSolver(chain, options) if solver == "ours"
                    else IkpyFrameSolver(model, chain, options))
    T = targets.shape[0]
    x_seed = seed[chain.variables]
    xs = np.empty((T, chain.num_variables))
    result = IKResult(joints=np.tile(seed, (T, 1)), success=np.zeros(T, bool),
                      position_error=np.zeros(T), rotation_error=np.zeros(T),
                      iterations=np.zeros(T, np.int64), restarts=np.zeros(T, np.int64),
                      solve_time_s=np.zeros(T))
    x_warm = x_seed
    for t in range(T):
        start = time.perf_counter()
        timeout = options.trajectory_timeout_s if mode == "trajectory" and t else options.timeout_s
        x, ok, pos_err, rot_err, iterations, restarts = frame_solver.solve(targets[t], x_warm, t,
                                                                           timeout)
        result.solve_time_s[t] = time.perf_counter() - start
        xs[t] = x
        result.success[t], result.position_error[t], result.rotation_error[t] = ok, pos_err, rot_err
        result.iterations[t], result.restarts[t] = iterations, restarts
        if mode == "trajectory" and ok:
            x_warm = x
    result.joints[:, chain.variables] = xs
    return result


class _OurFrameSolver:
    def __init__(self, chain: SerialChain, options: IKOptions):
        self.chain, self.options = chain, options
        self.settings = options.lm_settings()
        self.workspace = ChainWorkspace(chain)
        self.weights = np.array([1.0] * 3 + [options.rotation_weight ** 2] * 3)

    def solve(self, T_target: np.ndarray, x0: np.ndarray, frame: int, timeout_s: float):
        opts, chain = self.options, self.chain
        deadline = time.perf_counter() + timeout_s
        best = solve_one(self.workspace, T_target, x0, self.settings)
        iterations, restarts = best[4], 0
        rng = np.random.default_rng((opts.random_seed, frame))
        while not best[1] and restarts < opts.max_restarts and time.perf_counter() < deadline:
            restarts += 1
            attempt = solve_one(self.workspace, T_target, rng.uniform(chain.lower, chain.upper),
                                self.settings)
            iterations += attempt[4]
            if attempt[1] or self._cost(attempt) < self._cost(best):
                best = attempt
        x, ok, pos_err, rot_err, _ = best
        return x, ok, pos_err, rot_err, iterations, restarts

    def _cost(self, attempt) -> float:
        return attempt[2] ** 2 + (self.options.rotation_weight * attempt[3]) ** 2


class IkpyFrameSolver:
    """ikpy on the same chain: explicit URDF path (ikpy cannot branch), our active mask,
    seed clamped inside the limits (ikpy's default zero seed violates Panda joint 4)."""

    def __init__(self, model: RobotModel, chain: SerialChain, options: IKOptions):
        self.chain, self.options = chain, options
        self.ikpy_chain, self.active = _build_ikpy_chain(model, chain)

    def solve(self, T_target: np.ndarray, x0: np.ndarray, frame: int, timeout_s: float):
        del frame, timeout_s  # ikpy runs one scipy optimisation per frame
        full = np.zeros(len(self.ikpy_chain.links))
        full[self.active] = np.clip(x0, self.chain.lower, self.chain.upper)
        solution = self.ikpy_chain.inverse_kinematics_frame(
            T_target, initial_position=full, orientation_mode="all")
        x = np.clip(np.asarray(solution)[self.active], self.chain.lower, self.chain.upper)
        _, _, e = pose_residual(self.chain, T_target[None], x[None])
        pos_err, rot_err = float(np.linalg.norm(e[0, :3])), float(np.linalg.norm(e[0, 3:]))
        ok = pos_err <= self.options.position_tolerance and rot_err <= self.options.rotation_tolerance
        return x, ok, pos_err, rot_err, 0, 0


def _build_ikpy_chain(model: RobotModel, chain: SerialChain):
    import os
    import tempfile
    import warnings

    try:
        from ikpy.chain import Chain
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise InvalidArgument.for_field("solver", "solver 'ikpy' needs `pip install ikpy`") from exc
    tree = model.tree
    path = []
    index = model.link_index(chain.link)
    while index > 0:
        path.append(index)
        index = int(tree.parent[index])
    elements = [model.link_names[0]]
    for i in reversed(path):
        elements += [tree.link_joint_names[i], model.link_names[i]]
    actuated = set(model.joint_names[v] for v in chain.variables)
    # ikpy links: a virtual origin link, then one per joint on the path.
    mask = [False] + [tree.link_joint_names[i] in actuated for i in reversed(path)]
    with tempfile.NamedTemporaryFile("w", suffix=".urdf", delete=False) as handle:
        handle.write(_path_only_urdf(model.urdf_xml, elements))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ik_chain = Chain.from_urdf_file(handle.name, base_elements=elements,
                                            active_links_mask=mask, symbolic=False)
    finally:
        os.unlink(handle.name)
    return ik_chain, np.flatnonzero(mask)


def _path_only_urdf(urdf_xml: str, elements: list[str]) -> str:
    """The URDF pruned to the root->link path: ikpy follows children past the end of
    `base_elements`, which would put its end frame below our target link."""
    import xml.etree.ElementTree as ET

    # elements alternate link, joint, link, ...; a link and a joint may share a name.
    keep = {"link": set(elements[0::2]), "joint": set(elements[1::2])}
    root = ET.fromstring(urdf_xml)
    for el in list(root):
        # Transmissions also hold <joint> elements that ikpy would mistake for joints.
        if el.tag not in keep or el.get("name") not in keep[el.tag]:
            root.remove(el)
    return ET.tostring(root, encoding="unicode")
