"""k4d.tool.ToolTrack <-> the ToolTrack proto (GenerateRequest.tool): one pair of converters.

Reading (`tool_from_proto`):
  t_base_from_tool   required: (T, 4, 4) float32 or float64, each frame a finite rigid transform
  opening            required: (T,) float32 or float64, finite
  holding            optional bool (default false): the gripper holds an object at frame 0
  frames             when given, T must equal it (the robot condition's frames)
Errors are InvalidArgument naming the proto path below `field` (`tool.t_base_from_tool`,
`tool.opening`, and `tool` itself for a frame-count mismatch).
"""

from __future__ import annotations

import numpy as np
from kinema4d.v1 import generator_pb2

from k4d.camera import check_rigid
from k4d.errors import InvalidArgument
from k4d.store import from_tensor_data, to_tensor_data
from k4d.tensor_io import validate_array
from k4d.tool import ToolTrack

FLOATS = ("float32", "float64")
MAX_FRAMES = 100_000  # bounds the declared shapes before any bytes are read


def tool_to_proto(tool: ToolTrack) -> generator_pb2.ToolTrack:
    """Both arrays inline (T * 17 numbers; up to 8,192 frames fit the 1 MiB limit)."""
    return generator_pb2.ToolTrack(
        t_base_from_tool=to_tensor_data(tool.T_base_from_tool),
        opening=to_tensor_data(tool.opening), holding=tool.holding)


def tool_from_proto(msg: generator_pb2.ToolTrack, store=None, field: str = "tool",
                    frames: int | None = None) -> ToolTrack:
    """A validated ToolTrack; refs are read through `store`. InvalidArgument with proto field
    paths (module docstring)."""
    poses_field, opening_field = f"{field}.t_base_from_tool", f"{field}.opening"
    poses = from_tensor_data(msg.t_base_from_tool, store, poses_field, MAX_FRAMES * 16)
    opening = from_tensor_data(msg.opening, store, opening_field, MAX_FRAMES)
    dims: dict[str, int] = {}
    validate_array(poses, poses_field, dtype=FLOATS, shape=("T", 4, 4), dims=dims)
    validate_array(opening, opening_field, dtype=FLOATS, shape=("T",), dims=dims)
    if not np.isfinite(opening).all():
        raise InvalidArgument.for_field(opening_field, "must be finite")
    for index, pose in enumerate(poses):
        try:
            check_rigid(pose, poses_field)
        except InvalidArgument as exc:
            raise InvalidArgument.for_field(
                poses_field, f"frame {index}: {exc.violations[0].description}") from None
    tool = ToolTrack(poses, opening, msg.holding)
    if frames is not None:
        try:
            tool.check_frames(frames)
        except InvalidArgument as exc:
            raise InvalidArgument.for_field(field, exc.violations[0].description) from None
    return tool
