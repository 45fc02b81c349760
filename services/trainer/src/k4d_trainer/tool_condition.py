"""The tool condition of training samples (`model.tool_condition`: a transformer that reads
the gripper's state, k4d_model.conditions.tool_features): read off an episode's joints with
its robot's kinematics (k4d.tool.tool_track), as `k4d simulate` reads it off a rollout's.

Forward kinematics of a clip's frames is cheap, so the features are computed when the
trainer starts, beside the latent cache, not in it: a cache encoded without them serves a
run with them. A training sample (k4d_trainer.latents) then holds `tool` (F, features)."""

from __future__ import annotations

import numpy as np
import torch
from k4d.errors import InvalidArgument
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.tool import ToolTrack, tool_track
from k4d_model.conditions import tool_features

from k4d_trainer.clips import ClipSpec, frame_indices

TOOL_KEY = "tool"


def episode_tool(episode, clip: ClipSpec) -> ToolTrack:
    """The tool over an opened episode's clip frames. The gripper holds nothing at frame 0:
    an episode starts from its own first frame."""
    meta = episode.meta
    robot = load_robot(meta.robot)
    missing = [name for name in robot.joint_names if name not in meta.joint_names]
    if missing:
        raise InvalidArgument.for_field(
            "model.tool_condition", f"episode {meta.episode_id!r} records no joint "
                                    f"{missing[0]!r} of robot {meta.robot!r}")
    order = [meta.joint_names.index(name) for name in robot.joint_names]
    joints = np.asarray(episode["joints"][:], np.float64)
    joints = joints[frame_indices(meta.frames, clip.num_frames)][:, order]
    return tool_track(robot, joints, forward_kinematics(robot, joints))


def clip_tool_features(tool: ToolTrack, clip: ClipSpec, temporal_stride: int) -> torch.Tensor:
    """(F, features) float32: what the transformer reads of `tool` over the clip."""
    latent_frames = (clip.num_frames - 1) // temporal_stride + 1
    return torch.from_numpy(tool_features(tool, latent_frames, temporal_stride))


def tool_conditions(dataset, episode_ids: list[str], clip: ClipSpec, temporal_stride: int
                    ) -> dict[str, torch.Tensor]:
    """Each episode's tool features (`clip_tool_features`), by episode id."""
    return {episode_id: clip_tool_features(episode_tool(dataset.open(episode_id), clip), clip,
                                           temporal_stride)
            for episode_id in episode_ids}
