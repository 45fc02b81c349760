"""The kinematics stage core: a robot model and its actions -> joint trajectory (IK for
end-effector actions, with one job's time budget) and full-tree link poses.

Pure numpy, no store or bus: the stage worker (decode the event -> `run_kinematics` ->
store the arrays), the gRPC `SolveTrajectory`, `k4d kinematics solve` and the embedded
runner all call it, so the IK budget of a job is the same in every mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from k4d.actions import ActionSpec
from k4d.robots.model import RobotModel

from k4d_kinematics.ik import IKOptions
from k4d_kinematics.trajectory import TrajectoryResult, solve_actions

IK_REQUEST_BUDGET_S = 30.0  # restarts stop early enough that one request stays bounded


def job_ik_options(frames: int) -> IKOptions:
    """IK settings for a job of `frames` frames: the per-frame time budget keeps the whole
    job within IK_REQUEST_BUDGET_S (the defaults up to 60 frames, less per frame above)."""
    per_frame = min(0.5, IK_REQUEST_BUDGET_S / max(frames, 1))
    return IKOptions(timeout_s=per_frame, trajectory_timeout_s=min(0.05, per_frame))


def solve_trajectory(model: RobotModel, actions: ActionSpec) -> TrajectoryResult:
    """Actions -> joint trajectory and link poses, within the job's IK budget."""
    return solve_actions(model, actions, job_ik_options(actions.num_frames))


@dataclass
class KinematicsOutput:
    """What the stage passes on: joints (T, J) float64, poses (T, L, 4, 4) float64
    T_base_from_link, and how many frames IK did not reach."""

    joint_names: list[str]
    link_names: list[str]
    joints: np.ndarray
    poses: np.ndarray
    failed_frames: int = 0


def run_kinematics(model: RobotModel, actions: ActionSpec) -> KinematicsOutput:
    """The stage: `solve_trajectory` reduced to what the next stages and the results use."""
    result = solve_trajectory(model, actions)
    return KinematicsOutput(list(model.joint_names), list(model.link_names),
                            np.asarray(result.joints, np.float64),
                            np.asarray(result.poses, np.float64),
                            int((~np.asarray(result.success, bool)).sum()))
