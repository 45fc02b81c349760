"""Which robot a name means: a builtin robot from a PyPI data package, a user URDF/xacro
path, or a bundle registered in the object store (`k4d.robots.registry`).

`load_robot(name_or_path)` returns an immutable, cached `RobotModel`.
"""

from __future__ import annotations

import functools
import os
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from k4d.errors import FailedPrecondition, InvalidArgument, NotFound

from .loader import BUILTIN_ROBOTS, load_robot_file
from .model import KinematicTree, LinkGeometry, RobotModel
from .registry import RobotRegistry
from .resources import URDF_SUFFIXES, XACRO_SUFFIXES

__all__ = ["KinematicTree", "LinkGeometry", "RobotModel", "load_robot"]


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
