"""Malformed ToolTrack messages (GenerateRequest.tool), one list for every boundary that
reads them: k4d.tool_proto's own tests and the generator's gRPC tests."""

from __future__ import annotations

import numpy as np


def bad_tool_messages(tool) -> list[tuple[str, object, str]]:
    """(name, generator_pb2.ToolTrack, the field an INVALID_ARGUMENT must name) for a valid
    k4d.tool.ToolTrack `tool` of at least 4 frames."""
    from kinema4d.v1 import generator_pb2

    from k4d.store import to_tensor_data

    def message(poses, opening):
        return generator_pb2.ToolTrack(t_base_from_tool=to_tensor_data(np.asarray(poses)),
                                       opening=to_tensor_data(np.asarray(opening)))

    poses, opening = tool.T_base_from_tool, tool.opening
    infinite = poses.copy()
    infinite[1, 1, 1] = np.inf
    reflected = poses.copy()
    reflected[2, 0, 0] = -1.0
    scaled = poses.copy()
    scaled[1, :3, :3] *= 2.0
    bottom = poses.copy()
    bottom[0, 3, 0] = 0.5
    nan_opening = opening.copy()
    nan_opening[3] = np.nan
    poses_field, opening_field = "tool.t_base_from_tool", "tool.opening"
    return [("poses (T, 3, 4)", message(poses[:, :3], opening), poses_field),
            ("poses (4, 4)", message(poses[0], opening[:1]), poses_field),
            ("poses not finite", message(infinite, opening), poses_field),
            ("poses reflection", message(reflected, opening), poses_field),
            ("poses scaled", message(scaled, opening), poses_field),
            ("poses last row", message(bottom, opening), poses_field),
            ("poses uint8", message(poses.astype(np.uint8), opening), poses_field),
            ("poses int64", message(poses.astype(np.int64), opening), poses_field),
            ("poses unset", generator_pb2.ToolTrack(opening=to_tensor_data(opening)),
             poses_field),
            ("opening (T, 1)", message(poses, opening[:, None]), opening_field),
            ("opening frames", message(poses, opening[:3]), opening_field),
            ("opening not finite", message(poses, nan_opening), opening_field),
            ("opening unset", generator_pb2.ToolTrack(t_base_from_tool=to_tensor_data(poses)),
             opening_field)]
