"""RobotRef (proto) -> RobotModel, for every service that takes a robot."""

from __future__ import annotations

from k4d.errors import InvalidArgument

from .descriptions import load_robot
from .loader import BUILTIN_ROBOTS
from .model import RobotModel
from .registry import RobotRegistry


def robot_from_ref(ref, registry: RobotRegistry, field: str = "robot") -> RobotModel:
    """RobotRef -> model: a builtin or registered name, or a bundle object in the registry's
    store. Never a server-side file path."""
    source = ref.WhichOneof("source")
    if source == "name":
        return load_robot(ref.name) if ref.name in BUILTIN_ROBOTS else registry.load(ref.name)
    if source == "bundle_uri":
        try:
            key = registry.store.key_for_uri(ref.bundle_uri)
        except ValueError:  # InvalidArgument, or urlparse on a malformed URI
            raise InvalidArgument.for_field(f"{field}.bundle_uri", "not a URI of this object "
                                            "store") from None
        return registry.load_bundle(key)
    raise InvalidArgument.for_field(field, "set name or bundle_uri")
