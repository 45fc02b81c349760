"""CameraModel proto -> k4d.camera.Camera (the runtime's), violations named by proto paths
(`camera_to_proto`, the other way, is k4d_projection's)."""

from __future__ import annotations

import numpy as np
from k4d.errors import FieldViolation, InvalidArgument
from kinema4d.v1 import common_pb2

# Camera constructor field -> proto path below CameraModel.
_PROTO_PATH = {"width": "intrinsics.width", "height": "intrinsics.height",
               "fx": "intrinsics.fx", "fy": "intrinsics.fy", "cx": "intrinsics.cx",
               "cy": "intrinsics.cy", "distortion": "intrinsics.distortion",
               "T_cam_from_world": "t_cam_from_world", "T_world_from_base": "t_world_from_base"}


def _matrix(msg: common_pb2.Matrix4, field: str) -> np.ndarray:
    if len(msg.values) != 16:
        raise InvalidArgument.for_field(field, f"expected 16 values (row-major 4x4), "
                                               f"got {len(msg.values)}")
    return np.asarray(msg.values, np.float64).reshape(4, 4)


def camera_from_proto(msg: common_pb2.CameraModel, field: str = "camera"):
    """A validated k4d_projection Camera; InvalidArgument with proto field paths."""
    from k4d.camera import Camera

    i = msg.intrinsics
    if not msg.HasField("t_cam_from_world"):
        raise InvalidArgument.for_field(f"{field}.t_cam_from_world", "required")
    kwargs = dict(width=int(i.width), height=int(i.height), fx=i.fx, fy=i.fy, cx=i.cx, cy=i.cy,
                  T_cam_from_world=_matrix(msg.t_cam_from_world, f"{field}.t_cam_from_world"))
    if msg.HasField("t_world_from_base"):
        kwargs["T_world_from_base"] = _matrix(msg.t_world_from_base, f"{field}.t_world_from_base")
    if len(i.distortion):
        kwargs["distortion"] = tuple(i.distortion)
    try:
        return Camera(**kwargs)
    except InvalidArgument as exc:
        violations = [FieldViolation(f"{field}.{_PROTO_PATH.get(v.field, v.field)}", v.description)
                      for v in exc.violations]
        raise InvalidArgument("invalid camera: " + "; ".join(
            f"{v.field}: {v.description}" for v in violations), violations) from None


def camera_violations(msg: common_pb2.CameraModel, field: str = "camera") -> list[FieldViolation]:
    try:
        camera_from_proto(msg, field)
    except InvalidArgument as exc:
        return list(exc.violations)
    return []
