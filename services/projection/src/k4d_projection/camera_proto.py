"""Camera -> CameraModel proto, in a module light enough for the simulator's front door
(no kinematics or renderer imports). The reverse, with error field names, lives with
each reader: `k4d_projection.api.camera_from_proto`, `k4d_simulator.camera_proto`."""

from __future__ import annotations

from kinema4d.v1 import common_pb2

from k4d_projection.camera import Camera


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
