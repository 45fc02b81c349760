"""URDF text -> validated, file-system-free description (`UrdfRobot`).

Only the parts kinematics and rendering need are read: links with visual and
collision geometry (mesh/box/cylinder/sphere, origin, scale, material colour),
joints (fixed/revolute/continuous/prismatic, origin, axis, limits, mimic).
Every problem raises `InvalidArgument` whose field names the offending element,
e.g. `urdf.joint[panda_joint2].origin.xyz`.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

from k4d.errors import InvalidArgument
from k4d.rotations import make_transform, rpy_to_matrix

SUPPORTED_JOINT_TYPES = ("fixed", "revolute", "continuous", "prismatic")
MAX_URDF_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class UrdfGeometry:
    kind: str  # "mesh" | "box" | "cylinder" | "sphere"
    filename: str | None  # mesh URI as written in the URDF (unresolved)
    size: tuple  # box (x, y, z) / cylinder (radius, length) / sphere (radius,) / mesh ()
    scale: tuple  # (3,)
    T_link_from_geom: np.ndarray  # (4, 4)
    rgba: tuple | None  # (4,) or None when the URDF gives no colour


@dataclass(frozen=True)
class UrdfLink:
    name: str
    visuals: tuple[UrdfGeometry, ...] = ()
    collisions: tuple[UrdfGeometry, ...] = ()


@dataclass(frozen=True)
class UrdfMimic:
    joint: str
    multiplier: float = 1.0
    offset: float = 0.0


@dataclass(frozen=True)
class UrdfJoint:
    name: str
    type: str
    parent: str
    child: str
    T_parent_from_joint: np.ndarray  # (4, 4) the joint origin
    axis: np.ndarray  # (3,) unit vector in the joint frame
    lower: float
    upper: float
    mimic: UrdfMimic | None = None


@dataclass(frozen=True)
class UrdfRobot:
    name: str
    links: tuple[UrdfLink, ...]
    joints: tuple[UrdfJoint, ...]
    root: str
    children: dict = field(default_factory=dict)  # link -> tuple of child joints, document order

    def link(self, name: str) -> UrdfLink:
        return next(link for link in self.links if link.name == name)


def parse_urdf(text: str | bytes) -> UrdfRobot:
    """Parse and validate URDF text. Raises InvalidArgument naming the bad element."""
    if len(text) > MAX_URDF_BYTES:
        raise InvalidArgument.for_field("urdf", f"larger than {MAX_URDF_BYTES} bytes")
    probe = text if isinstance(text, str) else text.decode("utf-8", errors="replace")
    if "<!ENTITY" in probe:
        # Entity declarations are how XML bombs expand; URDF never needs them.
        raise InvalidArgument.for_field("urdf", "XML entity declarations are not allowed")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise InvalidArgument.for_field("urdf", f"malformed XML: {exc}") from None
    if root.tag != "robot":
        raise InvalidArgument.for_field("urdf", f"root element must be <robot>, got <{root.tag}>")
    materials = _parse_materials(root)
    links = [_parse_link(el, materials) for el in root.findall("link")]
    joints = [_parse_joint(el) for el in root.findall("joint")]
    if not links:
        raise InvalidArgument.for_field("urdf", "no <link> elements")
    _check_unique([link.name for link in links], "link")
    _check_unique([joint.name for joint in joints], "joint")
    root_link, children = _build_tree(links, joints)
    _check_mimics(joints)
    return UrdfRobot(name=root.get("name") or "robot", links=tuple(links), joints=tuple(joints),
                     root=root_link, children=children)


# ---------------------------------------------------------------- elements

def _parse_materials(root: ET.Element) -> dict[str, tuple]:
    materials = {}
    for el in root.findall("material"):
        name = el.get("name")
        color = el.find("color")
        if name and color is not None:
            materials[name] = _floats(color.get("rgba"), 4, f"urdf.material[{name}].color.rgba")
    return materials


def _parse_link(el: ET.Element, materials: dict) -> UrdfLink:
    name = el.get("name")
    if not name:
        raise InvalidArgument.for_field("urdf.link", "a <link> has no name")
    visuals = tuple(_parse_geometry(v, f"urdf.link[{name}].visual[{i}]", materials)
                    for i, v in enumerate(el.findall("visual")))
    collisions = tuple(_parse_geometry(c, f"urdf.link[{name}].collision[{i}]", None)
                       for i, c in enumerate(el.findall("collision")))
    return UrdfLink(name=name, visuals=visuals, collisions=collisions)


def _parse_geometry(el: ET.Element, where: str, materials: dict | None) -> UrdfGeometry:
    T = _parse_origin(el.find("origin"), where)
    geom = el.find("geometry")
    shapes = [] if geom is None else [g for g in geom if g.tag in ("mesh", "box", "cylinder", "sphere")]
    if len(shapes) != 1:
        raise InvalidArgument.for_field(f"{where}.geometry",
                                        "needs exactly one of mesh, box, cylinder, sphere")
    shape = shapes[0]
    rgba = _parse_rgba(el.find("material"), where, materials) if materials is not None else None
    scale: tuple = (1.0, 1.0, 1.0)
    filename = None
    if shape.tag == "mesh":
        filename = (shape.get("filename") or "").strip()
        if not filename:
            raise InvalidArgument.for_field(f"{where}.geometry.mesh", "missing filename")
        if shape.get("scale") is not None:
            scale = _floats(shape.get("scale"), 3, f"{where}.geometry.mesh.scale")
        size: tuple = ()
    elif shape.tag == "box":
        size = _floats(shape.get("size"), 3, f"{where}.geometry.box.size", positive=True)
    elif shape.tag == "cylinder":
        size = (_float(shape.get("radius"), f"{where}.geometry.cylinder.radius", positive=True),
                _float(shape.get("length"), f"{where}.geometry.cylinder.length", positive=True))
    else:
        size = (_float(shape.get("radius"), f"{where}.geometry.sphere.radius", positive=True),)
    return UrdfGeometry(kind=shape.tag, filename=filename, size=size, scale=scale,
                        T_link_from_geom=T, rgba=rgba)


def _parse_rgba(el: ET.Element | None, where: str, materials: dict) -> tuple | None:
    if el is None:
        return None
    color = el.find("color")
    if color is not None:
        return _floats(color.get("rgba"), 4, f"{where}.material.color.rgba")
    return materials.get(el.get("name") or "")


def _parse_joint(el: ET.Element) -> UrdfJoint:
    name = el.get("name")
    if not name:
        raise InvalidArgument.for_field("urdf.joint", "a <joint> has no name")
    where = f"urdf.joint[{name}]"
    jtype = el.get("type")
    if jtype not in SUPPORTED_JOINT_TYPES:
        raise InvalidArgument.for_field(f"{where}.type",
                                        f"unsupported joint type {jtype!r}; expected one of "
                                        + ", ".join(SUPPORTED_JOINT_TYPES))
    parent, child = el.find("parent"), el.find("child")
    if parent is None or not parent.get("link"):
        raise InvalidArgument.for_field(f"{where}.parent", "missing <parent link=...>")
    if child is None or not child.get("link"):
        raise InvalidArgument.for_field(f"{where}.child", "missing <child link=...>")
    axis = np.array([1.0, 0.0, 0.0])
    if el.find("axis") is not None:
        axis = np.array(_floats(el.find("axis").get("xyz"), 3, f"{where}.axis.xyz"))
    norm = float(np.linalg.norm(axis))
    if jtype != "fixed" and norm < 1e-9:
        raise InvalidArgument.for_field(f"{where}.axis.xyz", "axis must be non-zero")
    axis = axis / norm if norm > 0 else axis
    lower, upper = _parse_limits(el, jtype, where)
    return UrdfJoint(name=name, type=jtype, parent=parent.get("link"), child=child.get("link"),
                     T_parent_from_joint=_parse_origin(el.find("origin"), where), axis=axis,
                     lower=lower, upper=upper, mimic=_parse_mimic(el.find("mimic"), where))


def _parse_limits(el: ET.Element, jtype: str, where: str) -> tuple[float, float]:
    if jtype == "fixed":
        return 0.0, 0.0
    if jtype == "continuous":
        # Any angle is valid; [-pi, pi] covers every configuration once.
        return -math.pi, math.pi
    limit = el.find("limit")
    if limit is None:
        raise InvalidArgument.for_field(f"{where}.limit", f"{jtype} joint needs a <limit>")
    lower = _float(limit.get("lower", "0"), f"{where}.limit.lower")
    upper = _float(limit.get("upper", "0"), f"{where}.limit.upper")
    if lower > upper:
        raise InvalidArgument.for_field(f"{where}.limit", f"lower {lower} > upper {upper}")
    return lower, upper


def _parse_mimic(el: ET.Element | None, where: str) -> UrdfMimic | None:
    if el is None:
        return None
    target = el.get("joint")
    if not target:
        raise InvalidArgument.for_field(f"{where}.mimic", "missing joint attribute")
    return UrdfMimic(joint=target,
                     multiplier=_float(el.get("multiplier", "1"), f"{where}.mimic.multiplier"),
                     offset=_float(el.get("offset", "0"), f"{where}.mimic.offset"))


def _parse_origin(el: ET.Element | None, where: str) -> np.ndarray:
    if el is None:
        return np.eye(4)
    xyz = _floats(el.get("xyz", "0 0 0"), 3, f"{where}.origin.xyz")
    rpy = _floats(el.get("rpy", "0 0 0"), 3, f"{where}.origin.rpy")
    return make_transform(rpy_to_matrix(rpy), xyz)


# ---------------------------------------------------------------- structure

def _build_tree(links: list[UrdfLink], joints: list[UrdfJoint]) -> tuple[str, dict]:
    names = {link.name for link in links}
    parent_joint: dict[str, UrdfJoint] = {}
    children: dict[str, list[UrdfJoint]] = {name: [] for name in names}
    for joint in joints:
        for role, link in (("parent", joint.parent), ("child", joint.child)):
            if link not in names:
                raise InvalidArgument.for_field(f"urdf.joint[{joint.name}].{role}",
                                                f"unknown link {link!r}")
        if joint.child in parent_joint:
            raise InvalidArgument.for_field(
                f"urdf.joint[{joint.name}].child",
                f"link {joint.child!r} already has parent joint {parent_joint[joint.child].name!r}")
        parent_joint[joint.child] = joint
        children[joint.parent].append(joint)
    roots = [link.name for link in links if link.name not in parent_joint]
    if not roots:
        raise InvalidArgument.for_field("urdf", "kinematic cycle: every link has a parent")
    if len(roots) > 1:
        raise InvalidArgument.for_field("urdf", f"more than one root link: {roots[:5]}")
    reached, stack = set(), [roots[0]]
    while stack:
        link = stack.pop()
        reached.add(link)
        stack.extend(j.child for j in children[link])
    unreached = [link.name for link in links if link.name not in reached]
    if unreached:
        joint = parent_joint[unreached[0]]
        raise InvalidArgument.for_field(f"urdf.joint[{joint.name}]",
                                        f"kinematic cycle through link {unreached[0]!r}")
    return roots[0], {k: tuple(v) for k, v in children.items()}


def _check_mimics(joints: list[UrdfJoint]) -> None:
    by_name = {j.name: j for j in joints}
    for joint in joints:
        seen, current = {joint.name}, joint
        while current.mimic is not None:
            where = f"urdf.joint[{current.name}].mimic"
            target = by_name.get(current.mimic.joint)
            if target is None:
                raise InvalidArgument.for_field(where, f"unknown joint {current.mimic.joint!r}")
            if target.type == "fixed" or joint.type == "fixed":
                raise InvalidArgument.for_field(where, "mimic between a fixed joint is meaningless")
            if target.name in seen:
                raise InvalidArgument.for_field(where, "mimic joints form a cycle")
            seen.add(target.name)
            current = target


def _check_unique(names: list[str], kind: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise InvalidArgument.for_field(f"urdf.{kind}[{name}]", f"duplicate {kind} name")
        seen.add(name)


# ---------------------------------------------------------------- numbers

def _float(text: str | None, where: str, positive: bool = False) -> float:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidArgument.for_field(where, f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise InvalidArgument.for_field(where, f"must be finite, got {text!r}")
    if positive and value <= 0:
        raise InvalidArgument.for_field(where, f"must be > 0, got {text!r}")
    return value


def _floats(text: str | None, count: int, where: str, positive: bool = False) -> tuple:
    parts = (text or "").split()
    if len(parts) != count:
        raise InvalidArgument.for_field(where, f"expected {count} numbers, got {text!r}")
    return tuple(_float(p, where, positive) for p in parts)
