"""Camera <-> CameraModel proto: the one pair of converters lives in the runtime
(`k4d.camera_proto`); re-exported here for the projection package's callers."""

from k4d.camera_proto import camera_from_proto, camera_to_proto  # noqa: F401
