"""FK agrees with pinocchio on every link of every builtin robot; vectorisation and
mimic handling are correct."""

import numpy as np
import pytest
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.robots.loader import builtin_names

pin = pytest.importorskip("pinocchio")


def _pinocchio_poses(model, q: np.ndarray) -> np.ndarray:
    """(J,) -> (L, 4, 4) via pinocchio, mimic joints set from their source by hand."""
    pmodel = pin.buildModelFromXML(model.urdf_xml)
    pdata = pmodel.createData()
    tree = model.tree
    value_of = {}
    for i, joint_name in enumerate(tree.link_joint_names):
        if tree.q_index[i] >= 0:
            value_of[joint_name] = tree.q_multiplier[i] * q[tree.q_index[i]] + tree.q_offset[i]
    q_pin = pin.neutral(pmodel)
    for jid in range(1, pmodel.njoints):
        name, joint = pmodel.names[jid], pmodel.joints[jid]
        if joint.nq == 2:  # continuous joint: (cos, sin)
            q_pin[joint.idx_q:joint.idx_q + 2] = np.cos(value_of[name]), np.sin(value_of[name])
        else:
            q_pin[joint.idx_q] = value_of[name]
    pin.framesForwardKinematics(pmodel, pdata, q_pin)
    out = []
    for link in model.link_names:
        fid = pmodel.getFrameId(link, pin.FrameType.BODY)
        out.append(pdata.oMf[fid].homogeneous)
    return np.array(out)


@pytest.mark.parametrize("name", builtin_names())
def test_fk_matches_pinocchio_on_every_link(name):
    model = load_robot(name)
    rng = np.random.default_rng(0)
    q = rng.uniform(model.lower, model.upper, size=(20, model.num_joints))
    poses = forward_kinematics(model, q)
    assert poses.shape == (20, len(model.link_names), 4, 4)
    for t in range(0, 20, 4):
        expected = _pinocchio_poses(model, q[t])
        np.testing.assert_allclose(poses[t], expected, rtol=0, atol=1e-10)


def test_fk_single_configuration_matches_batch():
    model = load_robot("panda")
    q = model.mid_configuration
    single = forward_kinematics(model, q)
    batch = forward_kinematics(model, np.stack([q, q]))
    assert single.shape == (len(model.link_names), 4, 4)
    np.testing.assert_array_equal(single, batch[0])
    np.testing.assert_array_equal(batch[0], batch[1])


def test_panda_fingers_follow_mimic_symmetrically():
    model = load_robot("panda")
    q = model.mid_configuration.copy()
    q[model.joint_names.index("panda_finger_joint1")] = 0.03
    poses = forward_kinematics(model, q)
    hand = poses[model.link_index("panda_hand")]
    left = np.linalg.inv(hand) @ poses[model.link_index("panda_leftfinger")]
    right = np.linalg.inv(hand) @ poses[model.link_index("panda_rightfinger")]
    np.testing.assert_allclose(left[:3, 3], [0, 0.03, 0.0584], atol=1e-12)
    np.testing.assert_allclose(right[:3, 3], [0, -0.03, 0.0584], atol=1e-12)


def test_root_link_is_identity_and_rotations_orthonormal():
    model = load_robot("widowx250s")
    q = np.random.default_rng(1).uniform(model.lower, model.upper, size=(7, model.num_joints))
    poses = forward_kinematics(model, q)
    np.testing.assert_array_equal(poses[:, 0], np.broadcast_to(np.eye(4), (7, 4, 4)))
    R = poses[..., :3, :3]
    np.testing.assert_allclose(np.swapaxes(R, -1, -2) @ R, np.broadcast_to(np.eye(3), R.shape),
                               atol=1e-12)
