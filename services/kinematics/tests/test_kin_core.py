"""The kinematics stage core: one IK budget per job, whatever mode calls it."""

import numpy as np
import pytest
from k4d.actions import parse_actions
from k4d.robots.descriptions import load_robot
from k4d_kinematics.core import IK_REQUEST_BUDGET_S, job_ik_options, run_kinematics
from k4d_kinematics.ik import IKOptions


def test_the_job_budget_is_the_default_up_to_60_frames_and_shrinks_above():
    assert job_ik_options(49) == IKOptions()
    assert job_ik_options(60) == IKOptions()
    options = job_ik_options(120)
    assert options.timeout_s == pytest.approx(IK_REQUEST_BUDGET_S / 120)
    assert options.trajectory_timeout_s == pytest.approx(0.05)
    assert job_ik_options(1000).trajectory_timeout_s == pytest.approx(IK_REQUEST_BUDGET_S / 1000)


def test_run_kinematics_counts_the_frames_ik_missed():
    model = load_robot("panda")
    steps = [[0.4, 0.0, 0.5, 1.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.5, 1.0, 0.0, 0.0, 0.0]]
    actions = parse_actions({"type": "ee_pose", "rotation": "quat_xyzw", "dt": 0.1,
                             "num_frames": 4, "steps": steps})
    out = run_kinematics(model, actions)
    assert out.joints.shape == (4, model.num_joints) and out.poses.shape[:2] == (4, len(out.link_names))
    assert out.joint_names == list(model.joint_names)
    assert 1 <= out.failed_frames < 4  # 2 m is out of reach; the start is not
    assert out.joints.dtype == np.float64
