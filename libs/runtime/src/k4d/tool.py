"""The robot's tool over a rollout: where its tool frame is and how far its gripper is open,
frame by frame. Read off the kinematics stage's output (joints and link poses) with the robot
model's `ee_link` and `gripper_joints`, and passed to the generator with the rollout: a
conditioning signal a model's networks may learn from (a transformer with a tool condition
reads the gripper's state off it: k4d_model.conditions.tool_features)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from k4d.errors import InvalidArgument


@dataclass(frozen=True)
class ToolTrack:
    """T_base_from_tool: (T, 4, 4) float64, the tool frame (`ee_link`) in the robot's base
    frame. opening: (T,) float64, the gripper's opening in its joints' units (the sum of the
    gripper joints; larger is more open); all zeros for a robot without a gripper.
    holding: the gripper already holds an object at frame 0 (a clip that continues one in
    which it closed on the object: the second chunk of a policy's grasp)."""

    T_base_from_tool: np.ndarray
    opening: np.ndarray
    holding: bool = False

    def __post_init__(self):
        poses = np.asarray(self.T_base_from_tool, np.float64)
        opening = np.asarray(self.opening, np.float64)
        if poses.ndim != 3 or poses.shape[1:] != (4, 4) or not np.isfinite(poses).all():
            raise InvalidArgument.for_field("tool.T_base_from_tool",
                                            f"must be finite (T, 4, 4), got {poses.shape}")
        if opening.shape != poses.shape[:1] or not np.isfinite(opening).all():
            raise InvalidArgument.for_field("tool.opening", f"must be finite ({len(poses)},), "
                                                            f"got {opening.shape}")
        object.__setattr__(self, "T_base_from_tool", poses)
        object.__setattr__(self, "opening", opening)
        object.__setattr__(self, "holding", bool(self.holding))

    @property
    def frames(self) -> int:
        return int(self.opening.shape[0])

    def check_frames(self, frames: int) -> None:
        if self.frames != frames:
            raise InvalidArgument.for_field("tool", f"has {self.frames} frames, the robot "
                                                    f"condition {frames}")


def tool_track(model, joints: np.ndarray, poses: np.ndarray, holding: bool = False
               ) -> ToolTrack:
    """The tool of `model` (a k4d.robots.RobotModel) from the kinematics stage's output:
    joints (T, J) in model.joint_names order, poses (T, L, 4, 4) T_base_from_link in
    model.link_names order; `holding` as in ToolTrack."""
    joints = np.asarray(joints, np.float64)
    poses = np.asarray(poses, np.float64)
    tool = poses[:, model.link_index(model.ee_link)]
    gripper = model.joint_indices(list(model.gripper_joints)) if model.gripper_joints else []
    opening = joints[:, gripper].sum(axis=1) if len(gripper) else np.zeros(len(joints))
    return ToolTrack(tool, opening, holding)
