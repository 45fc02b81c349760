"""The camera model lives in the runtime (`k4d.camera`): the simulator front door
validates cameras without the projection package. Re-exported here for the renderer
and the projection CLI."""

from k4d.camera import (  # noqa: F401
    MAX_IMAGE_SIDE,
    Camera,
    distort_normalized,
    euler_xyz_to_matrix,
    invert_rigid,
    look_at_transform,
    undistort_normalized,
)
