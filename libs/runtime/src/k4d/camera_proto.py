"""k4d.camera.Camera <-> the CameraModel proto: one pair of converters, one behaviour for
every service (projection's gRPC and worker, the simulator's front door and embedded
runner), issue 9 point 11.

Reading (`camera_from_proto`):
  intrinsics          required; its fields are checked by the Camera model
  t_cam_from_world    required: 16 numbers, row-major 4x4, a rigid transform
  t_world_from_base   optional: absent or empty (0 values) means not given; otherwise 16
  distortion          optional: empty means none; otherwise the OpenCV 5 (k1 k2 p1 p2 k3)
Errors are InvalidArgument with one violation per bad field, named by its proto path below
`field` (e.g. `spec.camera.intrinsics.fx`, `camera.t_cam_from_world`), several at once when
the Camera model finds several.
"""

from __future__ import annotations

import numpy as np
from kinema4d.v1 import common_pb2

from k4d.camera import Camera, check_rigid
from k4d.errors import FieldViolation, InvalidArgument

# Camera constructor field -> proto path below CameraModel.
PROTO_PATH = {"width": "intrinsics.width", "height": "intrinsics.height",
              "fx": "intrinsics.fx", "fy": "intrinsics.fy", "cx": "intrinsics.cx",
              "cy": "intrinsics.cy", "distortion": "intrinsics.distortion",
              "T_cam_from_world": "t_cam_from_world", "T_world_from_base": "t_world_from_base"}


def camera_to_proto(camera: Camera) -> common_pb2.CameraModel:
    """Matrix4 values are the 16 numbers of the 4x4, row-major."""
    msg = common_pb2.CameraModel(
        intrinsics=common_pb2.CameraIntrinsics(
            width=camera.width, height=camera.height, fx=camera.fx, fy=camera.fy, cx=camera.cx,
            cy=camera.cy, distortion=list(camera.distortion or ())),
        t_cam_from_world=common_pb2.Matrix4(values=camera.T_cam_from_world.ravel().tolist()))
    if camera.T_world_from_base is not None:
        msg.t_world_from_base.values.extend(camera.T_world_from_base.ravel().tolist())
    return msg


def _matrix(msg: common_pb2.Matrix4, field: str, required: bool) -> np.ndarray | None:
    if not len(msg.values):
        if required:
            raise InvalidArgument.for_field(field, "required (16 values, row-major 4x4)")
        return None
    if len(msg.values) != 16:
        raise InvalidArgument.for_field(field, f"expected 16 values (row-major 4x4), "
                                               f"got {len(msg.values)}")
    return np.asarray(msg.values, np.float64).reshape(4, 4)


def camera_pose_from_proto(msg: common_pb2.Matrix4, field: str) -> np.ndarray:
    """A (4, 4) rigid transform (a camera's pose) from a Matrix4; InvalidArgument naming
    `field` when it is not 16 values of a rigid transform."""
    return check_rigid(_matrix(msg, field, required=True), field)


def camera_from_proto(msg: common_pb2.CameraModel, field: str = "camera") -> Camera:
    """A validated Camera; InvalidArgument with proto field paths (module docstring)."""
    if not msg.HasField("intrinsics"):
        raise InvalidArgument.for_field(f"{field}.intrinsics", "required")
    i = msg.intrinsics
    kwargs = dict(width=int(i.width), height=int(i.height), fx=i.fx, fy=i.fy, cx=i.cx, cy=i.cy,
                  T_cam_from_world=_matrix(msg.t_cam_from_world, f"{field}.t_cam_from_world",
                                           required=True))
    base = _matrix(msg.t_world_from_base, f"{field}.t_world_from_base", required=False)
    if base is not None:
        kwargs["T_world_from_base"] = base
    if len(i.distortion):
        kwargs["distortion"] = tuple(i.distortion)
    try:
        return Camera(**kwargs)
    except InvalidArgument as exc:
        violations = [FieldViolation(f"{field}.{PROTO_PATH.get(v.field, v.field)}", v.description)
                      for v in exc.violations]
        raise InvalidArgument("invalid camera: " + "; ".join(
            f"{v.field}: {v.description}" for v in violations), violations) from None


def camera_violations(msg: common_pb2.CameraModel, field: str = "camera") -> list[FieldViolation]:
    """The violations `camera_from_proto` would raise ([] for a valid camera)."""
    try:
        camera_from_proto(msg, field)
    except InvalidArgument as exc:
        return list(exc.violations)
    return []
