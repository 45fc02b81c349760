"""Robot registry: builtin robots from PyPI data packages, user URDF/xacro paths and
bundles registered in the object store.

`load_robot(name_or_path)` returns an immutable, cached `RobotModel`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from k4d.errors import FailedPrecondition, InvalidArgument, NotFound

from .model import KinematicTree, LinkGeometry, RobotModel, build_model
from .resources import URDF_SUFFIXES, XACRO_SUFFIXES, read_description, resolve_mesh
from .urdf import parse_urdf

__all__ = ["BUILTIN_ROBOTS", "KinematicTree", "LinkGeometry", "RobotModel", "builtin_names",
           "load_robot", "load_robot_file"]


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


def load_robot(name_or_path: str, store=None) -> RobotModel:
    """A builtin robot name, a path to a URDF/xacro file, or the name of a bundle registered
    in the object store `store` (see `k4d.robots.registry`). Cached per name."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InvalidArgument.for_field("robot", "robot name or path must be a non-empty string")
    if name_or_path in BUILTIN_ROBOTS:
        return _load_builtin(name_or_path)
    if name_or_path.endswith(URDF_SUFFIXES + XACRO_SUFFIXES) or os.sep in name_or_path:
        path = Path(name_or_path).expanduser().resolve()
        if not path.is_file():
            raise NotFound(f"robot file not found: {name_or_path}")
        return _load_file_cached(str(path), path.stat().st_mtime_ns)
    if store is not None:
        from .registry import RobotRegistry  # local import: the registry builds on this module

        return RobotRegistry(store).load(name_or_path)
    raise NotFound(f"unknown robot {name_or_path!r}; builtin robots: {', '.join(BUILTIN_ROBOTS)}; "
                   "or pass a URDF/xacro path")


@functools.lru_cache(maxsize=16)
def _load_builtin(name: str) -> RobotModel:
    spec = BUILTIN_ROBOTS[name]
    try:
        root = Path(str(distribution(spec.distribution).locate_file(spec.package_dir)))
    except PackageNotFoundError:
        raise FailedPrecondition(f"robot {name!r} needs `pip install {spec.distribution}`") from None
    return load_robot_file(root / spec.urdf, tree_root=root, name=name, source=f"builtin:{name}",
                           ee_link=spec.ee_link, gripper_joints=list(spec.gripper_joints),
                           xacro_args=spec.xacro_args)


@functools.lru_cache(maxsize=32)
def _load_file_cached(path: str, mtime_ns: int) -> RobotModel:
    del mtime_ns  # part of the cache key only: an edited file is reloaded
    return load_robot_file(Path(path))


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
