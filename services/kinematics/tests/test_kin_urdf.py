"""URDF parsing: joint kinds, origins, geometry, materials; malformed input rejected
with InvalidArgument naming the element."""

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.robots.loader import load_robot_file
from k4d.robots.urdf import parse_urdf

GOOD = """<robot name="toy">
  <material name="red"><color rgba="1 0 0 1"/></material>
  <link name="base">
    <visual><origin xyz="0 0 0.1" rpy="0 0 1.5707963267948966"/>
      <geometry><box size="0.1 0.2 0.3"/></geometry><material name="red"/></visual>
    <collision><geometry><cylinder radius="0.05" length="0.2"/></geometry></collision>
  </link>
  <link name="a"><visual><geometry><sphere radius="0.02"/></geometry>
    <material name="inline"><color rgba="0 1 0 0.5"/></material></visual></link>
  <link name="b"/>
  <link name="c"/>
  <link name="d"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="a"/>
    <origin xyz="0 0 1"/><axis xyz="0 0 2"/><limit lower="-1" upper="1"/></joint>
  <joint name="j2" type="prismatic"><parent link="a"/><child link="b"/>
    <axis xyz="1 0 0"/><limit lower="0" upper="0.5"/></joint>
  <joint name="j3" type="continuous"><parent link="b"/><child link="c"/></joint>
  <joint name="j4" type="prismatic"><parent link="b"/><child link="d"/>
    <axis xyz="1 0 0"/><limit lower="-0.5" upper="0"/><mimic joint="j2" multiplier="-1" offset="0.1"/></joint>
  <transmission name="t"><joint name="j1"/></transmission>
</robot>"""


def _write(tmp_path, text, name="toy.urdf"):
    path = tmp_path / "pkg" / "urdf" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_parses_joints_geometry_and_materials(tmp_path):
    model = load_robot_file(_write(tmp_path, GOOD))
    assert model.link_names == ["base", "a", "b", "c", "d"]
    assert model.joint_names == ["j1", "j2", "j3"]  # j4 is a mimic, not actuated
    np.testing.assert_allclose(model.lower, [-1, 0, -np.pi])
    assert model.continuous.tolist() == [False, False, True]
    box = model.visuals[0]
    assert box.primitive == "box" and box.size == (0.1, 0.2, 0.3) and box.rgba == (1, 0, 0, 1)
    np.testing.assert_allclose(box.T_link_from_geom[:3, 3], [0, 0, 0.1])
    np.testing.assert_allclose(box.T_link_from_geom[:3, 0], [0, 1, 0], atol=1e-12)
    assert model.visuals[1].rgba == (0, 1, 0, 0.5)
    assert model.collisions[0].primitive == "cylinder" and model.collisions[0].size == (0.05, 0.2)
    # Axis normalised, mimic applied with multiplier and offset.
    poses = forward_kinematics(model, np.array([0.0, 0.2, 0.0]))
    np.testing.assert_allclose(poses[2, :3, 3], [0.2, 0, 1])
    np.testing.assert_allclose(poses[4, :3, 3], [0.2 + (-0.2 + 0.1), 0, 1])  # d rides on b


def test_mesh_paths_are_resolved_and_scaled(tmp_path):
    text = GOOD.replace('<sphere radius="0.02"/>',
                        '<mesh filename="package://pkg/meshes/m.stl" scale="0.001 0.001 0.001"/>')
    path = _write(tmp_path, text)
    (tmp_path / "pkg" / "meshes").mkdir()
    (tmp_path / "pkg" / "meshes" / "m.stl").write_bytes(b"solid m\nendsolid m\n")
    model = load_robot_file(path)
    mesh = model.visuals[1]
    assert mesh.mesh_path == str((tmp_path / "pkg" / "meshes" / "m.stl").resolve())
    assert mesh.scale == (0.001, 0.001, 0.001) and mesh.primitive is None


@pytest.mark.parametrize("uri, message", [
    ("package://pkg/meshes/absent.stl", "missing mesh file"),
    ("../../../outside.stl", "outside the robot tree"),
    ("http://example.com/m.stl", "unsupported mesh URI"),
])
def test_bad_mesh_references_name_the_element(tmp_path, uri, message):
    (tmp_path / "outside.stl").write_text("solid\n")
    path = _write(tmp_path, GOOD.replace('<sphere radius="0.02"/>', f'<mesh filename="{uri}"/>'))
    with pytest.raises(InvalidArgument, match=message) as info:
        load_robot_file(path)
    assert info.value.violations[0].field == "urdf.link[a].visual[0].geometry.mesh"


@pytest.mark.parametrize("mutate, field", [
    (lambda s: s.replace('<child link="b"/>', '<child link="base"/>'), "urdf.joint[j2]"),
    (lambda s: s.replace('<parent link="b"/><child link="c"/>', '<parent link="c"/><child link="b"/>'),
     "urdf.joint[j3].child"),
    (lambda s: s.replace('xyz="0 0 1"', 'xyz="0 0"'), "urdf.joint[j1].origin.xyz"),
    (lambda s: s.replace('xyz="0 0 1"', 'xyz="0 nan 1"'), "urdf.joint[j1].origin.xyz"),
    (lambda s: s.replace('type="continuous"', 'type="floating"'), "urdf.joint[j3].type"),
    (lambda s: s.replace('<mimic joint="j2"', '<mimic joint="nope"'), "urdf.joint[j4].mimic"),
    (lambda s: s.replace('lower="-1" upper="1"', 'lower="1" upper="-1"'), "urdf.joint[j1].limit"),
    (lambda s: s.replace('<axis xyz="0 0 2"/>', '<axis xyz="0 0 0"/>'), "urdf.joint[j1].axis.xyz"),
    (lambda s: s.replace('<box size="0.1 0.2 0.3"/>', '<box size="0.1 -0.2 0.3"/>'),
     "urdf.link[base].visual[0].geometry.box.size"),
    (lambda s: s.replace('<link name="c"/>', '<link name="b"/>'), "urdf.link[b]"),
    (lambda s: s.replace('<parent link="a"/>', '<parent link="zz"/>'), "urdf.joint[j2].parent"),
    (lambda s: s[:-20], "urdf"),
    (lambda s: s.replace("<robot", "<robt").replace("</robot>", "</robt>"), "urdf"),
])
def test_malformed_urdf_is_rejected_with_field(mutate, field):
    with pytest.raises(InvalidArgument) as info:
        parse_urdf(mutate(GOOD))
    assert info.value.violations[0].field == field


def test_cycle_between_links_is_rejected():
    cyclic = """<robot name="c"><link name="r"/><link name="a"/><link name="b"/>
      <joint name="x" type="fixed"><parent link="a"/><child link="b"/></joint>
      <joint name="y" type="fixed"><parent link="b"/><child link="a"/></joint></robot>"""
    with pytest.raises(InvalidArgument, match="cycle"):
        parse_urdf(cyclic)


def test_mimic_cycle_and_entity_bomb_are_rejected():
    mimic_cycle = GOOD.replace('<limit lower="0" upper="0.5"/>',
                               '<limit lower="0" upper="0.5"/><mimic joint="j4"/>')
    with pytest.raises(InvalidArgument, match="cycle"):
        parse_urdf(mimic_cycle)
    bomb = '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa">]><robot name="x"><link name="&a;"/></robot>'
    with pytest.raises(InvalidArgument, match="entity"):
        parse_urdf(bomb)


def test_builtin_robots_describe_their_gripper_and_chain():
    panda = load_robot("panda")
    assert panda.ee_link == "panda_hand_tcp" and panda.gripper_joints == ["panda_finger_joint1"]
    assert panda.arm_joint_names == [f"panda_joint{i}" for i in range(1, 8)]
    assert "panda_rightfinger" in panda.link_names and all(
        p.endswith((".dae", ".stl")) for p in panda.mesh_files)
    wx = load_robot("widowx250s")
    assert wx.link_names[0] == "wx250s/base_link" and len(wx.arm_joint_names) == 6
    assert load_robot("panda") is panda  # cached, immutable
    with pytest.raises(ValueError):
        panda.lower[0] = 0.0


def test_user_urdf_with_dangling_package_meshes_names_the_first_missing_mesh(tmp_path):
    path = tmp_path / "p" / "urdf" / "panda_copy.urdf"
    path.parent.mkdir(parents=True)
    path.write_text(load_robot("panda").urdf_xml.replace("package://example-robot-data/robots/", ""))
    with pytest.raises(InvalidArgument, match="missing mesh file") as info:
        load_robot(str(path))
    assert info.value.violations[0].field == "urdf.link[panda_link0].visual[0].geometry.mesh"


def test_guessed_end_effector_stops_at_the_finger_branch(tmp_path):
    import re

    text = re.sub(r'<mesh filename="[^"]*"\s*/>', '<sphere radius="0.01"/>',
                  load_robot("panda").urdf_xml)
    path = tmp_path / "p" / "urdf" / "panda_primitives.urdf"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    model = load_robot(str(path))
    assert model.ee_link == "panda_hand"  # the hand branches into two moving fingers
    assert model.gripper_joints == ["panda_finger_joint1"]
    assert model.arm_joint_names == [f"panda_joint{i}" for i in range(1, 8)]
    assert model.mesh_files == [] and model.visuals[0].primitive == "sphere"
