"""The tool condition of training samples (`model.tool_condition`: a transformer that reads
the gripper's state, k4d_model.conditions.tool_features): read off an episode's joints with
its robot's kinematics (k4d.tool.tool_track), as `k4d simulate` reads it off a rollout's.
With `model.tool_position` the transformer also reads where the tool is in the camera frame
(k4d_model.conditions.tool_position_features): through the episode's camera at frame 0, in
the units of the clip's pointmap normalisation (the one its latents were encoded with).

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
from k4d_model.conditions import TOOL_FEATURES, reads_tool_position, tool_condition

from k4d_trainer.clips import ClipSpec, frame_indices, read_clip
from k4d_trainer.latents import clip_normalisation

TOOL_KEY = "tool"
# What the clip's pointmap normalisation reads (k4d_trainer.latents.clip_normalisation): the
# tool's position of an episode reads only these of its clip, not its videos.
NORMALISATION_ARRAYS = ("robot_pointmap", "robot_mask")


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


def clip_tool_features(tool: ToolTrack, clip: ClipSpec, temporal_stride: int,
                       features: int = TOOL_FEATURES, episode=None,
                       clip_arrays: dict[str, np.ndarray] | None = None) -> torch.Tensor:
    """(F, features) float32: what a transformer reading `features` tool features reads of
    `tool` over the clip. The tool's position needs the opened `episode` (its camera) and
    reads its clip's robot points for the normalisation (`clip_arrays` when already read)."""
    latent_frames = (clip.num_frames - 1) // temporal_stride + 1
    pose = norm = None
    if reads_tool_position(features):
        if episode is None:
            raise ValueError("the tool's position needs the episode (its camera)")
        pose = episode_camera_pose(episode)
        norm = clip_normalisation(clip_arrays if clip_arrays is not None
                                  else read_clip(episode, clip, names=NORMALISATION_ARRAYS))
    return torch.from_numpy(tool_condition(tool, latent_frames, temporal_stride, features,
                                           pose, norm))


def episode_camera_pose(episode) -> np.ndarray:
    """(4, 4) T_cam_from_base of the episode's camera at frame 0: the pose a rollout of it is
    sampled with (a moving camera's later poses are not read)."""
    return np.asarray(episode.meta.camera_at(0).T_cam_from_base, np.float64)


def tool_conditions(dataset, episode_ids: list[str], clip: ClipSpec, temporal_stride: int,
                    features: int = TOOL_FEATURES) -> dict[str, torch.Tensor]:
    """Each episode's tool features (`clip_tool_features`), by episode id."""
    out = {}
    for episode_id in episode_ids:
        episode = dataset.open(episode_id)
        out[episode_id] = clip_tool_features(episode_tool(episode, clip), clip,
                                             temporal_stride, features, episode)
    return out
