"""k4d.rotations (the one rotation module) against scipy's Rotation as the reference."""

import k4d.camera
import numpy as np
import pytest
from k4d.rotations import (
    euler_xyz_to_matrix,
    orthonormality_error,
    quat_to_matrix,
    quat_xyzw_to_rotvec,
    rotvec_to_quat_xyzw,
    rpy_to_matrix,
    so3_exp,
    so3_log,
)

Rotation = pytest.importorskip("scipy.spatial.transform").Rotation


def rotvecs(n=64, seed=0):
    rng = np.random.default_rng(seed)
    axes = rng.normal(size=(n, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    angles = np.concatenate([[0.0, 1e-10, 1e-5, np.pi - 1e-6, np.pi], rng.uniform(0, np.pi, n - 5)])
    return axes * angles[:, None]


def test_euler_and_rpy_match_scipy_extrinsic_xyz():
    for euler in np.random.default_rng(1).uniform(-np.pi, np.pi, (20, 3)):
        expected = Rotation.from_euler("xyz", euler).as_matrix()
        np.testing.assert_allclose(rpy_to_matrix(euler), expected, atol=1e-12)
        np.testing.assert_allclose(euler_xyz_to_matrix(euler), expected, atol=1e-12)
    assert k4d.camera.euler_xyz_to_matrix is euler_xyz_to_matrix  # the camera model uses this one


def test_exp_log_and_quaternions_match_scipy():
    rv = rotvecs()
    np.testing.assert_allclose(so3_exp(rv), Rotation.from_rotvec(rv).as_matrix(), atol=1e-12)
    below_pi = np.linalg.norm(rv, axis=1) < np.pi  # at pi, axis and -axis are one rotation
    np.testing.assert_allclose(so3_log(so3_exp(rv[below_pi])), rv[below_pi], atol=1e-7)
    np.testing.assert_allclose(so3_exp(so3_log(so3_exp(rv))), so3_exp(rv), atol=1e-9)
    q = rotvec_to_quat_xyzw(rv)
    assert q.shape == (len(rv), 4) and np.all(q[:, 3] >= -1e-15)
    np.testing.assert_allclose(np.abs(np.sum(q * Rotation.from_rotvec(rv).as_quat(), axis=1)), 1.0,
                               atol=1e-12)
    np.testing.assert_allclose(quat_to_matrix(q), so3_exp(rv), atol=1e-12)
    np.testing.assert_allclose(quat_xyzw_to_rotvec(q)[below_pi], rv[below_pi], atol=1e-9)
    # -q is the same rotation; the angle comes back in [0, pi]
    np.testing.assert_allclose(quat_xyzw_to_rotvec(-q)[below_pi], rv[below_pi], atol=1e-9)
    np.testing.assert_allclose(so3_exp(quat_xyzw_to_rotvec(q)), so3_exp(rv), atol=1e-9)
    assert np.all(orthonormality_error(so3_exp(rv)) < 1e-12)


def test_batched_shapes():
    rv = rotvecs(12).reshape(3, 4, 3)
    assert so3_exp(rv).shape == (3, 4, 3, 3)
    assert rotvec_to_quat_xyzw(rv).shape == (3, 4, 4)
    assert quat_xyzw_to_rotvec(rotvec_to_quat_xyzw(rv)).shape == (3, 4, 3)
