"""IK: reachable poses are solved within tolerance and limits, failures are reported
with residuals, trajectory mode warm-starts, ikpy stays selectable."""

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.robots.loader import builtin_names
from k4d_kinematics.chain import ChainWorkspace, build_chain, chain_fk, chain_jacobian
from k4d_kinematics.ik import IKOptions, solve_ik


def _targets(model, count, seed=0):
    q = np.random.default_rng(seed).uniform(model.lower, model.upper, (count, model.num_joints))
    return q, forward_kinematics(model, q)[:, model.link_index(model.ee_link)]


def _assert_within_limits(model, joints):
    assert np.all(joints >= model.lower - 1e-12) and np.all(joints <= model.upper + 1e-12)


def _assert_reaches(model, result, targets):
    poses = forward_kinematics(model, result.joints)[:, model.link_index(model.ee_link)]
    np.testing.assert_allclose(poses[:, :3, 3], targets[:, :3, 3], atol=1e-4)
    R_err = np.einsum("tij,tkj->tik", poses[:, :3, :3], targets[:, :3, :3])
    angle = np.arccos(np.clip((np.trace(R_err, axis1=1, axis2=2) - 1) / 2, -1, 1))
    assert angle.max() <= 1e-3


def test_chain_jacobian_matches_finite_differences():
    model = load_robot("panda")
    chain = build_chain(model)
    x = np.random.default_rng(2).uniform(chain.lower, chain.upper)
    frames, T = chain_fk(chain, x[None])
    J = chain_jacobian(chain, frames, T)[0]
    ws = ChainWorkspace(chain)
    np.testing.assert_allclose(ws.jacobian(ws.fk(x)), J, atol=1e-14)
    eps = 1e-7
    for k in range(chain.num_variables):
        dx = np.zeros_like(x)
        dx[k] = eps
        T_plus, T_minus = ws.fk(x + dx), ws.fk(x - dx)
        np.testing.assert_allclose((T_plus[:3, 3] - T_minus[:3, 3]) / (2 * eps), J[:3, k], atol=1e-6)
        dR = (T_plus[:3, :3] - T_minus[:3, :3]) / (2 * eps) @ ws.fk(x)[:3, :3].T
        np.testing.assert_allclose([dR[2, 1], dR[0, 2], dR[1, 0]], J[3:, k], atol=1e-6)


@pytest.mark.parametrize("name", builtin_names())
def test_reachable_poses_are_solved_within_tolerance_and_limits(name):
    model = load_robot(name)
    _, targets = _targets(model, 25)
    result = solve_ik(model, targets, mode="independent")
    assert result.success.all(), (result.position_error, result.rotation_error)
    _assert_within_limits(model, result.joints)
    _assert_reaches(model, result, targets)


def test_panda_success_rate_from_mid_range_seed():
    model = load_robot("panda")
    _, targets = _targets(model, 150, seed=11)
    result = solve_ik(model, targets, mode="independent")
    assert result.success.mean() >= 0.99
    assert np.median(result.solve_time_s) < 0.02  # generous: shared CI machines
    _assert_within_limits(model, result.joints)


def test_unreachable_target_is_reported_not_silently_returned():
    model = load_robot("panda")
    _, targets = _targets(model, 3)
    targets = targets.copy()
    targets[1, :3, 3] = [2.0, 0.0, 0.5]  # two metres away: outside the workspace
    result = solve_ik(model, targets, mode="independent",
                      options=IKOptions(max_restarts=3, timeout_s=0.05))
    assert result.success.tolist() == [True, False, True]
    assert result.position_error[1] > 0.5
    _assert_within_limits(model, result.joints)


def test_trajectory_mode_warm_starts_and_keeps_other_joints():
    model = load_robot("panda")
    rng = np.random.default_rng(4)
    a, b = rng.uniform(model.lower, model.upper, (2, model.num_joints))
    q = a + (b - a) * np.linspace(0, 1, 49)[:, None]
    targets = forward_kinematics(model, q)[:, model.link_index(model.ee_link)]
    seed = model.mid_configuration.copy()
    seed[-1] = 0.035  # finger opening is not part of the chain: copied through
    result = solve_ik(model, targets, seed=seed, mode="trajectory")
    assert result.success.all()
    assert np.all(result.joints[:, -1] == 0.035)
    assert np.median(result.iterations[1:]) <= 5  # warm start: a few iterations per frame
    # Continuity: consecutive solutions stay close (no branch flips).
    assert np.abs(np.diff(result.joints[:, :7], axis=0)).max() < 0.5


def test_other_link_and_bad_solver_or_mode():
    model = load_robot("panda")
    q, _ = _targets(model, 2)
    link_targets = forward_kinematics(model, q)[:, model.link_index("panda_link5")]
    result = solve_ik(model, link_targets, link="panda_link5", mode="independent")
    assert result.success.all()
    with pytest.raises(InvalidArgument, match="solver"):
        solve_ik(model, link_targets, solver="nope")
    with pytest.raises(InvalidArgument, match="mode"):
        solve_ik(model, link_targets, mode="nope")
    with pytest.raises(InvalidArgument, match="no link"):
        solve_ik(model, link_targets, link="nope")


def test_ikpy_solver_is_selectable_and_reports_residuals():
    model = load_robot("panda")
    _, targets = _targets(model, 3, seed=5)
    result = solve_ik(model, targets, solver="ikpy", mode="independent")
    _assert_within_limits(model, result.joints)
    assert result.position_error.shape == (3,)
    solved = result.success
    assert solved.any()
    poses = forward_kinematics(model, result.joints)[:, model.link_index(model.ee_link)]
    np.testing.assert_allclose(poses[solved, :3, 3], targets[solved, :3, 3], atol=1e-4)


PERMUTED = """<robot name="permuted">
  <link name="base"/><link name="l1"/><link name="l2"/><link name="tip"/><link name="side"/>
  <joint name="a" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 0 1"/>
    <limit lower="-2" upper="2"/></joint>
  <joint name="m" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0.3 0 0"/>
    <axis xyz="0 1 0"/><limit lower="-2" upper="2"/><mimic joint="z"/></joint>
  <joint name="b" type="revolute"><parent link="l2"/><child link="tip"/><origin xyz="0.3 0 0"/>
    <axis xyz="0 0 1"/><limit lower="-2" upper="2"/></joint>
  <joint name="z" type="revolute"><parent link="base"/><child link="side"/><axis xyz="1 0 0"/>
    <limit lower="-1" upper="1"/></joint>
</robot>"""


def test_chain_with_a_mimic_driven_from_outside_the_chain(tmp_path):
    # Joint m (on the chain to tip) mimics z (off the chain, a later actuated index), so the
    # chain's variables [a, b, z] are not in chain order [a, m, b].
    from k4d.robots.loader import load_robot_file

    path = tmp_path / "permuted" / "urdf" / "permuted.urdf"
    path.parent.mkdir(parents=True)
    path.write_text(PERMUTED)
    model = load_robot_file(path, ee_link="tip")
    chain = build_chain(model)
    x = np.array([0.3, 0.7, -0.5])
    q = np.zeros(model.num_joints)
    q[chain.variables] = x
    T_tip = forward_kinematics(model, q)[model.link_index("tip")]
    ws = ChainWorkspace(chain)
    np.testing.assert_allclose(ws.fk(x), T_tip, atol=1e-12)
    frames, T = chain_fk(chain, x[None])
    np.testing.assert_allclose(ws.jacobian(ws.fk(x)), chain_jacobian(chain, frames, T)[0],
                               atol=1e-12)
    result = solve_ik(model, T_tip[None], mode="independent")
    assert result.success.all()
    _assert_reaches(model, result, T_tip[None])
