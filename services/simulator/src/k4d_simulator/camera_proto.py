"""CameraModel proto -> k4d.camera.Camera: the one pair of converters lives in the runtime
(`k4d.camera_proto`); re-exported here for the simulator's callers."""

from k4d.camera_proto import camera_from_proto, camera_to_proto, camera_violations  # noqa: F401
