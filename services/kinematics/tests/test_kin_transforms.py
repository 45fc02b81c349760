"""SO(3)/SE(3) helpers and boundary validation of targets."""

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d.robots.validation import validate_targets
from k4d.rotations import quat_to_matrix, rpy_to_matrix, so3_exp, so3_log
from k4d_kinematics.lm import _rotation_error
from scipy.spatial.transform import Rotation


def test_so3_log_inverts_exp_everywhere_including_near_pi():
    rng = np.random.default_rng(0)
    axes = rng.normal(size=(200, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    angles = np.concatenate([rng.uniform(0, np.pi - 1e-3, 150), np.pi - np.logspace(-9, -4, 40),
                             np.full(5, np.pi), np.logspace(-12, -7, 5)])
    rotvec = axes * angles[:, None]
    recovered = so3_log(so3_exp(rotvec))
    same = np.isclose(np.linalg.norm(recovered, axis=1), np.pi)
    # At exactly pi, v and -v are the same rotation.
    np.testing.assert_allclose(so3_exp(recovered), so3_exp(rotvec), atol=1e-9)
    np.testing.assert_allclose(recovered[~same], rotvec[~same], atol=1e-7)
    scalar = np.array([_rotation_error(R) for R in so3_exp(rotvec)])
    np.testing.assert_allclose(so3_exp(scalar), so3_exp(rotvec), atol=1e-9)


def test_rpy_and_quaternion_match_scipy():
    rpy = np.array([0.3, -1.1, 2.5])
    np.testing.assert_allclose(rpy_to_matrix(rpy), Rotation.from_euler("xyz", rpy).as_matrix(),
                               atol=1e-15)
    quat = Rotation.from_euler("xyz", rpy).as_quat()
    np.testing.assert_allclose(quat_to_matrix(quat), Rotation.from_quat(quat).as_matrix(), atol=1e-15)


def test_validate_targets_accepts_both_layouts():
    pose = np.eye(4)
    pose[:3, :3] = rpy_to_matrix([0.1, 0.2, 0.3])
    pose[:3, 3] = [0.4, 0.5, 0.6]
    seven = np.concatenate([pose[:3, 3], Rotation.from_matrix(pose[:3, :3]).as_quat()])
    np.testing.assert_allclose(validate_targets(seven)[0], pose, atol=1e-12)
    assert validate_targets(pose).shape == (1, 4, 4)


@pytest.mark.parametrize("bad, message", [
    (np.diag([1.0, 1, -1, 1]), "not orthonormal"),  # a reflection, det = -1
    (np.array([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]), "last row"),
    (np.array([0, 0, 0, 0, 0, 0, 2.0]), "unit norm"),
    (np.zeros((0, 4, 4)), "expected"),
])
def test_validate_targets_rejects(bad, message):
    with pytest.raises(InvalidArgument, match=message):
        validate_targets(bad)
