"""Which columns of a LeRobot dataset's state are which robot joints (or end-effector pose
components), as `k4d datagen import-lerobot` reads them (docs/data.md, "State mapping").

Published datasets differ: a 9-value Panda state naming both finger joints (MuJoCo,
robosuite), DROID's 7 joints + a gripper position in [0, 1], LIBERO's end-effector position +
axis-angle + 2 finger joints. LeRobot writes each feature's column `names` in meta/info.json,
so by default columns whose name is a joint of the robot are that joint; mimic joints and
other columns are dropped (and listed in the episode's source record). Anything else takes an
explicit map, inline or as a JSON file:

    COLUMN=TARGET[*SCALE][+OFFSET],...      target value = SCALE * column + OFFSET

COLUMN is a name of the state feature's `names`, an index into it, or FEATURE[NAME|INDEX]
for a column of another feature. TARGET is a joint name or, with kind "ee_pose", one of
x y z (position, metres), rx ry rz (axis-angle), qx qy qz qw (quaternion) or
roll pitch yaw (Euler xyz, extrinsic: R = Rz(yaw) Ry(pitch) Rx(roll), as URDF rpy).
A JSON map: {"columns": {COLUMN: TARGET | {"target": T, "scale": s, "offset": o}},
"link": LINK, "T_base_from_world": 4x4, "T_link_from_ee": 4x4} (the last three for ee_pose).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from k4d.errors import InvalidArgument

KINDS = ("joints", "ee_pose")
POSITION_ROLES = ("x", "y", "z")
ROTATION_ROLES = {"axis_angle": ("rx", "ry", "rz"), "quaternion": ("qx", "qy", "qz", "qw"),
                  "euler_xyz": ("roll", "pitch", "yaw")}
POSE_ROLES = POSITION_ROLES + tuple(r for roles in ROTATION_ROLES.values() for r in roles)
FIELD = "--state-map"

_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TARGET = re.compile(rf"^(?P<target>[^*=,\s]+?)(?:\*(?P<scale>[-+]?{_NUMBER}))?(?P<offset>[-+]{_NUMBER})?$")
_COLUMN = re.compile(r"^(?P<feature>.+)\[(?P<key>[^\[\]]+)\]$")


@dataclass(frozen=True)
class Column:
    """One value per frame: `feature`'s column `index`; `label` is how the dataset names it."""

    feature: str
    index: int
    label: str


@dataclass(frozen=True)
class Entry:
    column: Column
    target: str  # a joint name or a pose role
    scale: float = 1.0
    offset: float = 0.0

    def record(self) -> dict:
        return {"column": self.column.label, "target": self.target, "scale": self.scale, "offset": self.offset}


@dataclass
class StateMapping:
    """Resolved against one dataset and one robot; `apply` turns feature arrays into joints
    (kind "joints") or into joints + end-effector poses (kind "ee_pose")."""

    kind: str
    entries: list[Entry]
    dropped: dict[str, str]  # column label -> why it is not used
    filled: dict[str, float]  # robot joints no column gives -> the value used (mid-range)
    rotation: str | None = None  # ee_pose: axis_angle | quaternion | euler_xyz
    link: str | None = None  # ee_pose: the link whose pose the state gives
    T_base_from_world: np.ndarray = field(default_factory=lambda: np.eye(4))
    T_link_from_ee: np.ndarray = field(default_factory=lambda: np.eye(4))

    @property
    def features(self) -> list[str]:
        return sorted({e.column.feature for e in self.entries})

    def values(self, data: dict[str, np.ndarray], target: str) -> np.ndarray:
        entry = next(e for e in self.entries if e.target == target)
        return entry.scale * data[entry.column.feature][:, entry.column.index] + entry.offset

    def joints(self, robot, data: dict[str, np.ndarray]) -> np.ndarray:
        """(T, J) the mapped joints; joints that need IK (ee_pose arm) hold the mid-range seed."""
        T = len(next(iter(data.values())))
        q = np.tile(robot.mid_configuration, (T, 1))
        for name, value in self.filled.items():
            q[:, robot.joint_names.index(name)] = value
        for entry in self.entries:
            if entry.target in robot.joint_names:
                q[:, robot.joint_names.index(entry.target)] = self.values(data, entry.target)
        return q

    def poses(self, data: dict[str, np.ndarray]) -> np.ndarray:
        """(T, 4, 4) T_base_from_link of `link` (ee_pose only)."""
        from k4d.rotations import quat_to_matrix, rpy_to_matrix, so3_exp

        position = np.stack([self.values(data, r) for r in POSITION_ROLES], axis=-1)
        rot = np.stack([self.values(data, r) for r in ROTATION_ROLES[self.rotation]], axis=-1)
        if self.rotation == "axis_angle":
            R = so3_exp(rot)
        elif self.rotation == "quaternion":
            R = quat_to_matrix(rot)
        else:
            R = np.stack([rpy_to_matrix(v) for v in rot]) if len(rot) else np.zeros((0, 3, 3))
        T_world_from_ee = np.tile(np.eye(4), (len(position), 1, 1))
        T_world_from_ee[:, :3, :3], T_world_from_ee[:, :3, 3] = R, position
        return self.T_base_from_world @ T_world_from_ee @ np.linalg.inv(self.T_link_from_ee)

    def record(self) -> dict:
        out = {"kind": self.kind, "columns": [e.record() for e in self.entries],
               "dropped_columns": dict(self.dropped), "filled_joints": dict(self.filled)}
        if self.kind == "ee_pose":
            out.update(rotation=self.rotation, link=self.link,
                       T_base_from_world=self.T_base_from_world.tolist(),
                       T_link_from_ee=self.T_link_from_ee.tolist())
        return out


def feature_names(feature: dict) -> list[str] | None:
    """A feature's column names: LeRobot writes a list, older datasets {"motors": [...]}
    or {"axes": [...]} (one list under one key)."""
    names = feature.get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return list(names)
    return None


def feature_width(feature: dict) -> int:
    return int(np.prod(feature.get("shape") or [0]))


def parse_spec(text: str | None) -> dict | None:
    """--state-map as given: a JSON file path or the inline COLUMN=TARGET,... form ->
    {"columns": {column: {"target", "scale", "offset"}}, ...}."""
    if text is None or not text.strip():
        return None
    path = Path(text)
    if text.endswith(".json") or ("=" not in text and _is_file(path)):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidArgument.for_field(FIELD, f"cannot read the map {text}: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("columns"), dict) or not doc["columns"]:
            raise InvalidArgument.for_field(FIELD, f"{text} must hold {{\"columns\": {{COLUMN: TARGET, ...}}, ...}}")
        columns = {str(k): _parse_target(v) for k, v in doc["columns"].items()}
        return {**doc, "columns": columns}
    columns: dict[str, dict] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        column, sep, target = item.partition("=")
        if not sep or not column.strip():
            raise InvalidArgument.for_field(FIELD, f"expected COLUMN=TARGET[*SCALE][+OFFSET], got {item!r}")
        if column.strip() in columns:
            raise InvalidArgument.for_field(FIELD, f"column {column.strip()!r} is mapped twice")
        columns[column.strip()] = _parse_target(target.strip())
    if not columns:
        raise InvalidArgument.for_field(FIELD, "the map is empty")
    return {"columns": columns}


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the filesystem is not a file
        return False


def _parse_target(value) -> dict:
    if isinstance(value, dict):
        target = value.get("target", value.get("joint"))
        try:
            scale, offset = float(value.get("scale", 1.0)), float(value.get("offset", 0.0))
        except (TypeError, ValueError):
            raise InvalidArgument.for_field(FIELD, f"scale and offset must be numbers in {value!r}") from None
        if not isinstance(target, str) or not target:
            raise InvalidArgument.for_field(FIELD, f"{value!r} names no target")
        return _checked({"target": target, "scale": scale, "offset": offset})
    match = _TARGET.match(str(value))
    if not match:
        raise InvalidArgument.for_field(FIELD, f"expected TARGET[*SCALE][+OFFSET], got {value!r}")
    return _checked({"target": match["target"], "scale": float(match["scale"] or 1.0),
                     "offset": float(match["offset"] or 0.0)})


def _checked(target: dict) -> dict:
    if not (np.isfinite(target["scale"]) and np.isfinite(target["offset"])) or target["scale"] == 0:
        raise InvalidArgument.for_field(FIELD, f"{target['target']}: the scale must be finite and non-zero, "
                                        "the offset finite")
    return target


def _column(ref: str, features: dict, state_key: str) -> Column:
    """COLUMN -> Column: a name or index of the state feature, or FEATURE[NAME|INDEX]."""
    state = features.get(state_key)
    match = _COLUMN.match(ref)
    if match and match["feature"] in features:
        feature_key, key = match["feature"], match["key"]
    elif match and ref not in (feature_names(state or {}) or []):  # a name may hold brackets
        raise InvalidArgument.for_field(FIELD, f"column {ref!r}: {match['feature']!r} is not a feature of this "
                                        f"dataset ({sorted(features)})")
    elif state is None:
        raise InvalidArgument.for_field(FIELD, f"column {ref!r}: the dataset has no {state_key!r}; write "
                                        f"FEATURE[COLUMN] (features: {sorted(features)})")
    else:
        feature_key, key = state_key, ref
    feature = features[feature_key]
    names, width = feature_names(feature), feature_width(feature)
    if names is not None and key in names:
        return Column(feature_key, names.index(key), ref)
    if key.lstrip("-").isdigit():
        index = int(key)
        if not 0 <= index < width:
            raise InvalidArgument.for_field(FIELD, f"column {ref!r} is outside {feature_key} (width {width})")
        return Column(feature_key, index, ref if match else (names[index] if names else str(index)))
    known = f"its names are {names}" if names else f"it has no column names: use indices 0..{width - 1}"
    raise InvalidArgument.for_field(FIELD, f"column {key!r} is not in {feature_key} ({known})")


def _mimic_joints(robot) -> dict[str, str]:
    """Mimic joint name -> the actuated joint it follows."""
    tree = robot.tree
    return {name: robot.joint_names[int(q)] for name, q in zip(tree.link_joint_names, tree.q_index, strict=True)
            if q >= 0 and name not in robot.joint_names}


def resolve(spec: dict | None, *, features: dict, state_key: str, robot, kind: str = "joints") -> StateMapping:
    """The mapping of one dataset's state onto `robot`; every error is one line on --state-map,
    --state-kind or --state-key."""
    if kind not in KINDS:
        raise InvalidArgument.for_field("--state-kind", f"unknown kind {kind!r}; one of {list(KINDS)}")
    if state_key not in features and spec is None:
        raise InvalidArgument.for_field(
            "--state-key", f"the dataset has no joint states ({state_key!r} is not among its features {sorted(features)})")
    # With a map, every column may come from other features (FEATURE[COLUMN]).
    feature = features.get(state_key, {})
    names, width = feature_names(feature), feature_width(feature)
    if names is not None and len(names) != width:
        raise InvalidArgument.for_field("--state-key", f"{state_key} has shape {feature.get('shape')} but "
                                        f"{len(names)} names: the state width does not match its names")
    mimic = _mimic_joints(robot)
    if spec is None:
        entries, dropped = _default_entries(feature, state_key, robot, kind, mimic)
    else:
        entries = [Entry(_column(ref, features, state_key), t["target"], t["scale"], t["offset"])
                   for ref, t in spec["columns"].items()]
        used = {(e.column.feature, e.column.index) for e in entries}
        dropped = {(names[i] if names else str(i)): "not in --state-map" for i in range(width)
                   if (state_key, i) not in used}
    mapping = StateMapping(kind=kind, entries=entries, dropped=dropped, filled={})
    _check_targets(mapping, robot, mimic, spec is None, state_key, width)
    if kind == "ee_pose":
        _resolve_pose(mapping, spec or {}, robot)
    return mapping


def _default_entries(feature, state_key, robot, kind, mimic):
    names, width = feature_names(feature), feature_width(feature)
    if names is None:
        # No names (older datasets): the columns are the robot's joints or its arm joints in order.
        if kind == "joints" and width in (robot.num_joints, len(robot.arm_joint_names)):
            order = robot.joint_names if width == robot.num_joints else robot.arm_joint_names
            return [Entry(Column(state_key, i, str(i)), name) for i, name in enumerate(order)], {}
        raise InvalidArgument.for_field(
            "--state-map", f"{state_key} has {width} values per frame and no column names but robot {robot.name!r} "
                           f"has {robot.num_joints} joints ({len(robot.arm_joint_names)} in the arm): the joint "
                           "counts do not match; give --state-map COLUMN=JOINT,...")
    entries, dropped = [], {}
    roles = POSE_ROLES if kind == "ee_pose" else ()
    for i, name in enumerate(names):
        if name in robot.joint_names or name in roles:
            entries.append(Entry(Column(state_key, i, name), name))
        elif name in mimic:
            dropped[name] = f"mimic joint (follows {mimic[name]})"
        else:
            dropped[name] = f"not a joint of robot {robot.name!r}"
    return entries, dropped


def _check_targets(mapping: StateMapping, robot, mimic: dict, by_names: bool, state_key: str, width: int) -> None:
    seen: dict[str, str] = {}
    for entry in mapping.entries:
        target = entry.target
        if target in seen:
            raise InvalidArgument.for_field(FIELD, f"{target} is given by two columns ({seen[target]!r} and "
                                            f"{entry.column.label!r})")
        seen[target] = entry.column.label
        if target in POSE_ROLES:
            if mapping.kind != "ee_pose":
                raise InvalidArgument.for_field(FIELD, f"{target!r} is an end-effector pose component; "
                                                "add --state-kind ee_pose")
        elif target in mimic:
            raise InvalidArgument.for_field(FIELD, f"{target!r} is a mimic joint of robot {robot.name!r} (it "
                                            f"follows {mimic[target]}); map {mimic[target]}")
        elif target not in robot.joint_names:
            raise InvalidArgument.for_field(FIELD, f"{target!r} is not a joint of robot {robot.name!r} "
                                            f"(joints: {robot.joint_names}; pose components: {list(POSE_ROLES)})")
        elif mapping.kind == "ee_pose" and target in robot.arm_joint_names:
            raise InvalidArgument.for_field(FIELD, f"{target!r} is an arm joint: with --state-kind ee_pose the "
                                            "arm joints come from IK; map only gripper joints")
    if mapping.kind == "joints":
        missing = [n for n in robot.arm_joint_names if n not in seen]
        if missing:
            how = "its names cover" if by_names else "--state-map gives"
            raise InvalidArgument.for_field(
                FIELD, f"{state_key} has {width} values per frame but robot {robot.name!r} has {robot.num_joints} "
                       f"joints ({len(robot.arm_joint_names)} in the arm): the joint counts do not match; {how} "
                       f"{sorted(seen)} but not {missing}; give --state-map COLUMN=JOINT,...")
    # Joints no column gives (grippers of arm-only states) keep the middle of their range.
    mapping.filled = {n: float(robot.mid_configuration[i]) for i, n in enumerate(robot.joint_names)
                      if n not in seen and not (mapping.kind == "ee_pose" and n in robot.arm_joint_names)}


def _resolve_pose(mapping: StateMapping, spec: dict, robot) -> None:
    targets = {e.target for e in mapping.entries}
    if not set(POSITION_ROLES) <= targets:
        raise InvalidArgument.for_field(FIELD, f"--state-kind ee_pose needs columns for x, y and z; the map gives "
                                        f"{sorted(targets)}")
    kinds = [k for k, roles in ROTATION_ROLES.items() if targets & set(roles)]
    if len(kinds) != 1 or not set(ROTATION_ROLES[kinds[0]]) <= targets:
        raise InvalidArgument.for_field(
            FIELD, "--state-kind ee_pose needs one complete rotation: rx ry rz (axis-angle), qx qy qz qw "
                   f"(quaternion) or roll pitch yaw (Euler xyz); the map gives {sorted(targets & set(POSE_ROLES))}")
    mapping.rotation = kinds[0]
    mapping.link = str(spec.get("link") or robot.ee_link)
    if mapping.link not in robot.link_names:
        raise InvalidArgument.for_field(FIELD, f"robot {robot.name!r} has no link {mapping.link!r}")
    for key in ("T_base_from_world", "T_link_from_ee"):
        if key in spec:
            setattr(mapping, key, _transform(spec[key], key))


def _transform(value, key: str) -> np.ndarray:
    try:
        T = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        T = np.zeros(0)
    if T.shape != (4, 4) or not np.isfinite(T).all() or not np.allclose(T[3], [0, 0, 0, 1]):
        raise InvalidArgument.for_field(FIELD, f"{key} must be a 4x4 rigid transform (last row 0 0 0 1)")
    R = T[:3, :3]
    if not np.allclose(R @ R.T, np.eye(3), atol=1e-6) or np.linalg.det(R) < 0:
        raise InvalidArgument.for_field(FIELD, f"{key} must hold a proper rotation")
    return T
