"""Robot descriptions from files: a URDF/xacro file (`load_robot_file`) and where the
builtin robots' descriptions lie inside installed PyPI data packages (`BUILTIN_ROBOTS`).

Which robot a name means (builtin, path or registered bundle) is `k4d.robots.descriptions`;
the bundle registry (`k4d.robots.registry`) builds on this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from k4d.errors import InvalidArgument

from .model import RobotModel, build_model
from .resources import XACRO_SUFFIXES, read_description, resolve_mesh
from .urdf import parse_urdf

__all__ = ["BUILTIN_ROBOTS", "BuiltinRobot", "builtin_names", "load_robot_file"]


@dataclass(frozen=True)
class BuiltinRobot:
    """Where a builtin robot's description lives inside an installed data package."""

    distribution: str  # PyPI distribution name
    package_dir: str  # directory inside the distribution that is the robot's tree root
    urdf: str  # description file, relative to package_dir
    ee_link: str
    gripper_joints: tuple[str, ...]
    description: str
    xacro_args: dict = field(default_factory=dict)


BUILTIN_ROBOTS: dict[str, BuiltinRobot] = {
    "panda": BuiltinRobot(
        "example-robot-data", "cmeel.prefix/share/example-robot-data",
        "robots/panda_description/urdf/panda.urdf", ee_link="panda_hand_tcp",
        gripper_joints=("panda_finger_joint1",),
        description="Franka Emika Panda + Franka hand, both fingers (DROID, LIBERO)"),
    "ur5": BuiltinRobot(
        "example-robot-data", "cmeel.prefix/share/example-robot-data",
        "robots/ur_description/urdf/ur5_robot.urdf", ee_link="tool0", gripper_joints=(),
        description="Universal Robots UR5 (no gripper)"),
    "xarm7": BuiltinRobot(
        "example-robot-data", "cmeel.prefix/share/example-robot-data",
        "robots/xarm_description/urdf/xarm7.urdf", ee_link="link_eef", gripper_joints=(),
        description="UFactory xArm7 (no gripper)"),
    "so100": BuiltinRobot(
        "example-robot-data", "cmeel.prefix/share/example-robot-data",
        "robots/so_arm_description/urdf/so100.urdf", ee_link="gripper",
        gripper_joints=("gripper",),
        description="SO-ARM100 5-DoF arm with moving jaw (LeRobot)"),
    "widowx250s": BuiltinRobot(
        "rtb-data", "rtbdata/xacro/trossen_descriptions", "urdf/wx250s.urdf.xacro",
        ee_link="wx250s/ee_gripper_link", gripper_joints=("left_finger",),
        description="Trossen WidowX 250s 6-DoF with fingers (Bridge)",
        xacro_args={"robot_name": "wx250s"}),
}


def builtin_names() -> list[str]:
    return list(BUILTIN_ROBOTS)


def load_robot_file(path: Path, *, tree_root: Path | None = None, name: str | None = None,
                    source: str | None = None, ee_link: str | None = None,
                    gripper_joints: list[str] | None = None, xacro_args: dict | None = None,
                    allow_xacro: bool = True) -> RobotModel:
    """Build a RobotModel from a URDF/xacro file; meshes must lie inside `tree_root`
    (default: the parent of the URDF's directory, the usual package layout)."""
    path = Path(path).resolve()
    if path.name.endswith(XACRO_SUFFIXES) and not allow_xacro:
        raise InvalidArgument.for_field("robot", "xacro files are not accepted here; "
                                        "expand to plain URDF first")
    urdf_xml = read_description(path, xacro_args)
    robot = parse_urdf(urdf_xml)
    urdf_dir = path.parent
    root = Path(tree_root).resolve() if tree_root is not None else urdf_dir.parent

    def resolve(uri: str, where: str) -> str:
        return resolve_mesh(uri, urdf_dir, root, where)

    return build_model(robot, name=name or robot.name, urdf_xml=urdf_xml,
                       source=source or str(path), resolve_mesh=resolve, ee_link=ee_link,
                       gripper_joints=gripper_joints)
