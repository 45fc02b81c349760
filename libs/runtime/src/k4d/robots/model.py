"""The immutable robot model (`RobotModel`, `LinkGeometry`, `KinematicTree`) built
from a validated `UrdfRobot` plus resolved mesh files.

Tree order: depth-first from the root link, children in document order, so every
link comes after its parent. Actuated joints (`joint_names`) are the movable,
non-mimic joints in that order; mimic joints follow their source joint's value
(`value = multiplier * q[source] + offset`) and are not part of `joint_names`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from k4d.errors import InvalidArgument

from .urdf import UrdfGeometry, UrdfJoint, UrdfRobot

JOINT_FIXED, JOINT_REVOLUTE, JOINT_PRISMATIC = 0, 1, 2
DEFAULT_RGBA = (0.7, 0.7, 0.7, 1.0)


@dataclass(frozen=True)
class LinkGeometry:
    """One visual or collision shape attached to a link."""

    link_name: str
    link_index: int
    mesh_path: str | None  # absolute .stl/.obj/.dae path, None for primitives
    primitive: str | None  # "box" | "cylinder" | "sphere" when there is no mesh
    size: tuple  # box (x, y, z) / cylinder (radius, length) / sphere (radius,) / mesh ()
    T_link_from_geom: np.ndarray  # (4, 4) float64
    scale: tuple  # (3,)
    rgba: tuple  # (4,)


@dataclass(frozen=True, eq=False)
class KinematicTree:
    """Per-link arrays FK runs on (L = number of links, tree order).

    parent: (L,) parent link index, -1 for the root.
    joint_type: (L,) JOINT_FIXED / JOINT_REVOLUTE (incl. continuous) / JOINT_PRISMATIC of the
      joint whose child the link is (the root counts as fixed).
    T_parent_from_joint: (L, 4, 4) joint origins. axis: (L, 3) unit axes in the joint frame.
    q_index: (L,) index into the actuated joint vector driving the link's joint (-1 if fixed);
    q_multiplier, q_offset: (L,) mimic map, joint value = multiplier * q[q_index] + offset.
    """

    parent: np.ndarray
    joint_type: np.ndarray
    T_parent_from_joint: np.ndarray
    axis: np.ndarray
    q_index: np.ndarray
    q_multiplier: np.ndarray
    q_offset: np.ndarray
    link_joint_names: tuple  # (L,) name of the joint above each link ("" for the root)


@dataclass(frozen=True, eq=False)
class RobotModel:
    """Immutable robot: names, limits, geometry and the kinematic tree."""

    name: str
    link_names: list[str]
    joint_names: list[str]
    lower: np.ndarray  # (J,)
    upper: np.ndarray  # (J,)
    continuous: np.ndarray  # (J,) bool: angle wraps, limits are [-pi, pi] by convention
    ee_link: str
    gripper_joints: list[str]
    arm_joint_names: list[str]  # actuated joints from the root to ee_link (the IK chain)
    visuals: list[LinkGeometry]
    collisions: list[LinkGeometry]
    tree: KinematicTree
    urdf_xml: str  # the (expanded) URDF text the model was built from
    source: str  # builtin:<name>, a file path or store:<name>

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def link_index(self, link_name: str) -> int:
        try:
            return self.link_names.index(link_name)
        except ValueError:
            raise InvalidArgument.for_field("link", f"robot {self.name!r} has no link "
                                            f"{link_name!r}") from None

    def joint_indices(self, names: list[str]) -> np.ndarray:
        return np.array([self.joint_names.index(n) for n in names], dtype=np.int64)

    @property
    def mid_configuration(self) -> np.ndarray:
        """(J,) middle of the joint ranges: the default IK seed."""
        return (self.lower + self.upper) / 2.0

    @property
    def mesh_files(self) -> list[str]:
        seen: dict[str, None] = {}
        for geom in (*self.visuals, *self.collisions):
            if geom.mesh_path:
                seen.setdefault(geom.mesh_path, None)
        return list(seen)


def build_model(robot: UrdfRobot, *, name: str, urdf_xml: str, source: str,
                resolve_mesh: Callable[[str, str], str], ee_link: str | None = None,
                gripper_joints: list[str] | None = None) -> RobotModel:
    """Assemble a RobotModel. `resolve_mesh(uri, where)` returns an absolute mesh path."""
    order = _tree_order(robot)
    joint_of = {j.child: j for j in robot.joints}
    actuated = [joint_of[link] for link in order[1:]
                if joint_of[link].type != "fixed" and joint_of[link].mimic is None]
    joint_names = [j.name for j in actuated]
    tree = _kinematic_tree(robot, order, joint_of, joint_names)
    if ee_link is None:
        ee_link = _guess_ee_link(robot, order, joint_of)
    if ee_link not in order:
        raise InvalidArgument.for_field("ee_link", f"robot {name!r} has no link {ee_link!r}")
    arm = _chain_joints(ee_link, joint_of, set(joint_names))
    if gripper_joints is None:
        gripper_joints = [n for n in joint_names if n not in arm and _below(robot, ee_link, n)]
    for joint in gripper_joints:
        if joint not in joint_names:
            raise InvalidArgument.for_field("gripper_joints", f"{joint!r} is not an actuated joint")
    lower = np.array([j.lower for j in actuated], dtype=np.float64)
    upper = np.array([j.upper for j in actuated], dtype=np.float64)
    for arr in (lower, upper):
        arr.setflags(write=False)
    visuals, collisions = _geometries(robot, order, resolve_mesh)
    return RobotModel(
        name=name, link_names=order, joint_names=joint_names, lower=lower, upper=upper,
        continuous=np.array([j.type == "continuous" for j in actuated], dtype=bool),
        ee_link=ee_link, gripper_joints=list(gripper_joints), arm_joint_names=arm,
        visuals=visuals, collisions=collisions, tree=tree, urdf_xml=urdf_xml, source=source)


def _tree_order(robot: UrdfRobot) -> list[str]:
    order, stack = [], [robot.root]
    while stack:
        link = stack.pop()
        order.append(link)
        stack.extend(j.child for j in reversed(robot.children[link]))
    return order


def _kinematic_tree(robot: UrdfRobot, order: list[str], joint_of: dict[str, UrdfJoint],
                    joint_names: list[str]) -> KinematicTree:
    index = {link: i for i, link in enumerate(order)}
    by_name = {j.name: j for j in robot.joints}
    L = len(order)
    parent = np.full(L, -1, dtype=np.int64)
    joint_type = np.zeros(L, dtype=np.int64)
    T_origin = np.tile(np.eye(4), (L, 1, 1))
    axis = np.zeros((L, 3))
    q_index = np.full(L, -1, dtype=np.int64)
    multiplier, offset = np.zeros(L), np.zeros(L)
    kinds = {"fixed": JOINT_FIXED, "revolute": JOINT_REVOLUTE, "continuous": JOINT_REVOLUTE,
             "prismatic": JOINT_PRISMATIC}
    for i, link in enumerate(order[1:], start=1):
        joint = joint_of[link]
        parent[i] = index[joint.parent]
        joint_type[i] = kinds[joint.type]
        T_origin[i] = joint.T_parent_from_joint
        axis[i] = joint.axis
        if joint.type == "fixed":
            continue
        # Follow a mimic chain to its actuated source, composing the affine maps.
        source, mult, off = joint, 1.0, 0.0
        while source.mimic is not None:
            mult, off = mult * source.mimic.multiplier, mult * source.mimic.offset + off
            source = by_name[source.mimic.joint]
        q_index[i], multiplier[i], offset[i] = joint_names.index(source.name), mult, off
    arrays = (parent, joint_type, T_origin, axis, q_index, multiplier, offset)
    for arr in arrays:
        arr.setflags(write=False)
    names = ("",) + tuple(joint_of[link].name for link in order[1:])
    return KinematicTree(*arrays, link_joint_names=names)


def _guess_ee_link(robot: UrdfRobot, order: list[str], joint_of: dict[str, UrdfJoint]) -> str:
    """Follow the chain from the root while it does not branch into several moving
    subtrees; stop at such a branch (a hand with two fingers). Past the last moving
    joint, follow a single chain of fixed children (a tool frame) to its end."""
    def moves(link: str) -> bool:
        return any(j.type != "fixed" or moves(j.child) for j in robot.children[link])

    link = robot.root
    while True:
        children = robot.children[link]
        moving_children = [j for j in children if j.type != "fixed" or moves(j.child)]
        if len(moving_children) > 1:
            return link
        if len(moving_children) == 1:
            link = moving_children[0].child
        elif len(children) == 1:
            link = children[0].child
        else:
            return link


def _chain_joints(link: str, joint_of: dict[str, UrdfJoint], actuated: set[str]) -> list[str]:
    chain = []
    while link in joint_of:
        joint = joint_of[link]
        if joint.name in actuated:
            chain.append(joint.name)
        link = joint.parent
    return chain[::-1]


def _below(robot: UrdfRobot, link: str, joint_name: str) -> bool:
    stack = [link]
    while stack:
        current = stack.pop()
        for joint in robot.children[current]:
            if joint.name == joint_name:
                return True
            stack.append(joint.child)
    return False


def _geometries(robot: UrdfRobot, order: list[str], resolve_mesh) -> tuple[list, list]:
    visuals, collisions = [], []
    for index, link_name in enumerate(order):
        link = robot.link(link_name)
        for kind, geoms, out in (("visual", link.visuals, visuals),
                                 ("collision", link.collisions, collisions)):
            for i, geom in enumerate(geoms):
                where = f"urdf.link[{link_name}].{kind}[{i}].geometry.mesh"
                out.append(_link_geometry(geom, link_name, index, resolve_mesh, where))
    return visuals, collisions


def _link_geometry(geom: UrdfGeometry, link_name: str, index: int, resolve_mesh,
                   where: str) -> LinkGeometry:
    T = np.array(geom.T_link_from_geom, dtype=np.float64)
    T.setflags(write=False)
    return LinkGeometry(
        link_name=link_name, link_index=index,
        mesh_path=resolve_mesh(geom.filename, where) if geom.kind == "mesh" else None,
        primitive=None if geom.kind == "mesh" else geom.kind, size=tuple(geom.size),
        T_link_from_geom=T, scale=tuple(geom.scale), rgba=tuple(geom.rgba or DEFAULT_RGBA))
