"""Building the model's conditioning tensors from pixels, as the official pipeline does.

- `uniform_pointmap`: the synthetic first-frame pointmap put beside the first RGB frame.
- `first_frame_mask`: the 4-channel latent mask of the first-frame condition
  (1 on the RGB half, 0.5 on the pointmap half for latent frame 0, 0 after).
- `downsample_robot_mask`: robot occupancy to the latent grid (frame 0 nearest,
  later frames nearest then max over groups of 4).
- `PointmapNormalization`: metric camera-space XYZ <-> the [-1, 1] range the
  VAE saw in training (centre + one isotropic scale).
- `tool_features`: the gripper's state per latent frame, what a model with a tool
  condition (`Kinema4DTransformer3DModel(tool_features=...)`) reads beside the robot's
  pixels: kinematics knows it, the robot's few finger pixels barely show it.
- `tool_position_features`: where the tool is in the camera frame and how far it moved
  since frame 0, per latent frame, which a model with the tool's position reads too
  (`tool_condition` builds either from the transformer's feature count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from k4d.tool import ToolTrack

# Pointmap latents are shifted/scaled after the VAE's own normalisation (REFERENCE section 2).
POINTMAP_LATENT_MEAN = -0.17
POINTMAP_LATENT_STD = 1.36


def uniform_pointmap(height: int, width: int) -> np.ndarray:
    """(H, W, 3) float64 in [0, 1]: x and y linspaces, z = 1 - row / (H - 1)."""
    x = np.linspace(0.0, 1.0, width)
    y = np.linspace(0.0, 1.0, height)
    xv, yv = np.meshgrid(x, y)
    z = np.repeat((1.0 - np.linspace(0.0, 1.0, height))[:, None], width, axis=1)
    z = (z - z.min()) / (np.ptp(z) + 1e-8)
    return np.stack([xv, yv, z], axis=-1)


def first_frame_mask(batch: int, num_frames: int, latent_height: int, latent_width: int,
                     temporal_stride: int) -> torch.Tensor:
    """(B, stride, F_lat, h, 2w) for a clip of `num_frames` PIXEL frames: latent frame 0 is 1
    on the RGB half and 0.5 on the pointmap half (in all `stride` channels), later frames 0."""
    mask = torch.zeros(batch, 1, num_frames, latent_height, latent_width)
    mask[:, :, 0, :, : latent_width // 2] = 1.0
    mask[:, :, 0, :, latent_width // 2:] = 0.5
    first = mask[:, :, :1].repeat_interleave(temporal_stride, dim=2)
    mask = torch.cat([first, mask[:, :, 1:]], dim=2)
    return mask.view(batch, -1, temporal_stride, latent_height, latent_width).transpose(1, 2)


# Per latent frame: the opening over the clip's widest, its change from frame 0 over the
# same, whether the gripper holds an object at frame 0, the frame's place in the clip.
TOOL_FEATURES = 4


def tool_features(tool: ToolTrack, latent_frames: int, temporal_stride: int) -> np.ndarray:
    """(latent_frames, TOOL_FEATURES) float32 of a rollout's `tool` (one entry per pixel
    frame, 1 + stride * (latent_frames - 1) of them). A latent frame k >= 1 reads its
    chunk's last pixel frame, stride * k. The opening is relative to the clip's widest, so
    no robot's joint units or limits enter (a robot without a gripper reads 0); a clip
    whose gripper never moves reads 1 throughout, open or closed: `holding` tells a
    closed grip on an object apart."""
    expected = 1 + temporal_stride * (latent_frames - 1)
    tool.check_frames(expected)
    opening = tool.opening[np.arange(latent_frames) * temporal_stride]
    widest = float(tool.opening.max())
    scale = 1.0 / widest if widest > 0 else 0.0
    place = np.linspace(0.0, 1.0, latent_frames) if latent_frames > 1 else np.zeros(1)
    return np.stack([opening * scale, (opening - tool.opening[0]) * scale,
                     np.full(latent_frames, float(tool.holding)), place], axis=1
                    ).astype(np.float32)


# With the tool's position: per latent frame also the tool frame's origin in the camera frame,
# in the normalised units of the points the transformer sees, and its displacement from frame
# 0 in the same units. Kinematics and the camera pose know it; on the latent grid, a held
# object's motion is that displacement, and only a network can say which cells are held.
TOOL_POSITION_FEATURES = 6


def tool_position_features(tool: ToolTrack, latent_frames: int, temporal_stride: int,
                           T_cam_from_base: np.ndarray, norm: PointmapNormalization
                           ) -> np.ndarray:
    """(latent_frames, TOOL_POSITION_FEATURES) float32 of a rollout's `tool` seen by the
    camera at `T_cam_from_base` (4, 4): the tool frame's origin normalised with `norm` (the
    rollout's pointmap normalisation, clipped to [-1, 1] as the scene's points are), then its
    displacement from frame 0 over norm.scale (not clipped). Latent frame k reads pixel frame
    stride * k, as `tool_features` does."""
    tool.check_frames(1 + temporal_stride * (latent_frames - 1))
    pose = np.asarray(T_cam_from_base, np.float64)
    origins = tool.T_base_from_tool[np.arange(latent_frames) * temporal_stride, :3, 3]
    in_camera = origins @ pose[:3, :3].T + pose[:3, 3]
    moved = (in_camera - in_camera[0]) / norm.scale
    return np.concatenate([norm.normalise(in_camera.astype(np.float32)), moved], axis=1
                          ).astype(np.float32)


def reads_tool_position(features: int) -> bool:
    """Whether a transformer reading `features` tool features reads the tool's position."""
    return features == TOOL_FEATURES + TOOL_POSITION_FEATURES


def tool_condition(tool: ToolTrack, latent_frames: int, temporal_stride: int, features: int,
                   T_cam_from_base: np.ndarray | None = None,
                   norm: PointmapNormalization | None = None) -> np.ndarray:
    """(latent_frames, features) float32: what a transformer reading `features` tool
    features reads, the gripper's state (`tool_features`), then with TOOL_FEATURES +
    TOOL_POSITION_FEATURES the tool's position (`tool_position_features`, which needs the
    camera pose and the normalisation)."""
    state = tool_features(tool, latent_frames, temporal_stride)
    if features == TOOL_FEATURES:
        return state
    if not reads_tool_position(features):
        raise ValueError(f"a tool condition has {TOOL_FEATURES} or "
                         f"{TOOL_FEATURES + TOOL_POSITION_FEATURES} features, got {features}")
    if T_cam_from_base is None or norm is None:
        raise ValueError("the tool's position needs the camera pose and the normalisation")
    position = tool_position_features(tool, latent_frames, temporal_stride, T_cam_from_base,
                                      norm)
    return np.concatenate([state, position], axis=1)


def downsample_robot_mask(mask: torch.Tensor, latent_height: int, latent_width: int,
                          temporal_stride: int) -> torch.Tensor:
    """mask: (B, 1, T, H, W) float in {0, 1}, T = 1 + stride * k -> (B, 1, 1 + k, h, w)."""
    b, c, t, h, w = mask.shape
    spatial = F.interpolate(mask.reshape(-1, 1, h, w), size=(latent_height, latent_width),
                            mode="nearest").reshape(b, c, t, latent_height, latent_width)
    later = spatial[:, :, 1:].reshape(b, c, -1, temporal_stride, latent_height, latent_width)
    return torch.cat([spatial[:, :, :1], later.max(dim=3).values], dim=2)


@dataclass(frozen=True)
class PointmapNormalization:
    """p_normalised = (p_metric - centre) / scale, clipped to [-1, 1].

    centre: (3,) metres in the camera frame; scale: metres per unit.
    source: where it came from ("given", "robot-percentiles").
    """

    centre: tuple[float, float, float]
    scale: float
    source: str = "given"

    def normalise(self, points: np.ndarray) -> np.ndarray:
        out = (points - np.asarray(self.centre, dtype=np.float32)) / np.float32(self.scale)
        return np.clip(out, -1.0, 1.0).astype(np.float32)

    def denormalise(self, points: np.ndarray) -> np.ndarray:
        return (points * np.float32(self.scale) + np.asarray(self.centre, np.float32)).astype(
            np.float32)

    @classmethod
    def from_points(cls, points: np.ndarray, mask: np.ndarray, margin: float = 2.0
                    ) -> PointmapNormalization:
        """A clip-wide normalisation from the robot's own points when the scene's is unknown:
        2/98 percentile box centre, half the largest extent x `margin` as scale (the scene
        around the robot is larger than the robot, hence the margin)."""
        valid = points[mask.astype(bool)]
        if valid.shape[0] < 2:
            return cls((0.0, 0.0, 1.0), 1.0, "default")
        lo, hi = np.percentile(valid, 2, axis=0), np.percentile(valid, 98, axis=0)
        centre = (lo + hi) / 2.0
        scale = float(max((hi - lo).max() / 2.0 * margin, 1e-3))
        return cls(tuple(float(c) for c in centre), scale, "robot-percentiles")

    def to_dict(self) -> dict:
        return {"centre": list(self.centre), "scale": self.scale, "source": self.source}
