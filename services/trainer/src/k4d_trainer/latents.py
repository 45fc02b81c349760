"""Pre-encoded training samples: VAE latents and CLIP image embeddings per episode.

A sample is built by the generator's own inference code (`Kinema4DPipeline.encode_image`,
`prepare_condition`, `prepare_arm_cond`, `encode_video`), so training sees exactly the
conditioning the generator computes at inference:

    latents       (16, F, h, 2w)  target x0 = [RGB latents | pointmap latents (z+0.17)/1.36];
                                  with `tracks`, the pointmap half encodes where frame 0's
                                  surfaces are at each frame (k4d_trainer.object_flow)
    condition     (20, F, h, 2w)  first-frame mask + latents of [first frame | uniform pointmap]
    image_embeds  (N, D)          CLIP penultimate hidden states of the first frame
    arm_cond      (20, F, h, 2w)  robot mask + robot latents (w for `pmcond`), no soft mask
    change        (1, F, h, 2w)   1 where the scene changed from frame 0 off the robot
                                  (k4d_tabletop.scene_change, any pixel of the latent cell), else 0:
                                  what `training.changed_loss_weight` weights

The scene pointmap is normalised with the same `PointmapNormalization` the generator
derives from the robot's points at inference, so decoded outputs de-normalise alike.

The cache is one safetensors object per episode under a URI (local or s3://), tagged with
a fingerprint of the encoders and the clip; an episode whose object exists with the same
fingerprint is skipped, which makes encoding resumable and shardable across ranks.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from k4d_model.checkpoints import ModelComponents
from k4d_model.conditions import (
    POINTMAP_LATENT_MEAN,
    POINTMAP_LATENT_STD,
    PointmapNormalization,
)
from k4d_model.pipeline import Kinema4DPipeline, _to_video, model_id_of
from k4d_model.results import RobotCondition
from k4d_tabletop import scene_change
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from k4d_trainer import uris
from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.model import sampling_components
from k4d_trainer.object_flow import episode_tracks
from k4d_trainer.parallel import autocast

SAMPLE_KEYS = ("latents", "condition", "image_embeds", "arm_cond", "change")
INDEX_FILE = "index.json"


def _digest(module: torch.nn.Module) -> str:
    """Content id of a module's weights (the generator's model id, applied to one module)."""
    return model_id_of(ModelComponents(module, None, None, None, None, None))


def clip_normalisation(clip: dict[str, np.ndarray]) -> PointmapNormalization:
    """What the generator uses at inference (from the robot's points), or the identity for
    pointmaps stored already normalised (official Robo4D files)."""
    if bool(clip.get("normalised", False)):
        return PointmapNormalization((0.0, 0.0, 0.0), 1.0, "official-8bit")
    return PointmapNormalization.from_points(clip["robot_pointmap"].astype(np.float32),
                                             clip["robot_mask"])


def normalised_scene(clip: dict[str, np.ndarray], norm: PointmapNormalization) -> np.ndarray:
    """(T, H, W, 3) scene pointmap in [-1, 1]; invalid points (zeros) at -1 like the black
    background of the 8-bit videos."""
    scene = clip["pointmap"].astype(np.float32)
    pm = norm.normalise(scene)
    if not bool(clip.get("normalised", False)):
        pm[~np.isfinite(scene).all(-1) | (scene == 0).all(-1)] = -1.0
    return pm


def scene_depth(clip: dict[str, np.ndarray]) -> np.ndarray:
    """(T, H, W) float32 metres: the metric scene pointmap's depth, 0 where no point is known
    (non-finite or all zero)."""
    points = clip["pointmap"].astype(np.float32)
    known = np.isfinite(points).all(-1) & ~(points == 0).all(-1)
    return np.where(known, np.nan_to_num(points[..., 2]), 0.0).astype(np.float32)


def changed_pixels(clip: dict[str, np.ndarray]) -> np.ndarray:
    """(T, H, W) bool: the pixels that changed from frame 0 off the robot (in that frame and
    in frame 0), the evaluator's `changed` region; depth from the metric scene pointmap,
    colour alone for stored [-1, 1] codes."""
    depth = None if bool(clip.get("normalised", False)) else scene_depth(clip)
    robot = np.asarray(clip["robot_mask"], dtype=bool)
    return scene_change.changed_from_first(clip["rgb"], depth) & ~robot & ~robot[:1]


def change_map(clip: dict[str, np.ndarray], latent_height: int, latent_width: int,
               temporal_stride: int) -> torch.Tensor:
    """(1, F, h, w) float: 1 on the latent cells (frame 0's alone, then each chunk of
    `temporal_stride` frames) holding a pixel of `changed_pixels`."""
    frames = torch.from_numpy(changed_pixels(clip).astype(np.float32))[:, None]  # (T, 1, H, W)
    cells = F.adaptive_max_pool2d(frames, (latent_height, latent_width))[:, 0]
    later = cells[1:].reshape(-1, temporal_stride, latent_height, latent_width).amax(dim=1)
    return torch.cat([cells[:1], later])[None]


def sample_clip(episode, clip: ClipSpec, tracks: bool = False) -> dict[str, np.ndarray]:
    """An opened episode's clip arrays as `SampleEncoder.encode` reads them; with `tracks`,
    the ground truth's tracks of frame 0's surfaces too (k4d_trainer.object_flow)."""
    arrays = read_clip(episode, clip)
    if tracks:
        arrays["tracks"] = episode_tracks(episode, clip)
    return arrays


class SampleEncoder:
    """Episode clip arrays -> one training sample, with the generator pipeline's code."""

    def __init__(self, components: ModelComponents, device: str | torch.device = "cpu",
                 compute_dtype: torch.dtype | None = None, tracks: bool = False):
        self.pipe = Kinema4DPipeline(sampling_components(components), backend=None,
                                     device=str(device), model_id="trainer-encoder")
        self.variant = components.transformer.config.variant
        info = components.info
        payload = {"vae": _digest(components.vae), "clip": _digest(components.image_encoder),
                   "variant": self.variant, "size": [info.num_frames, info.height, info.width],
                   "format": 2}  # 2: with the change map
        if compute_dtype is not None:  # encoded under autocast: not the fp32 cache's latents
            payload["precision"] = str(compute_dtype).removeprefix("torch.")
        if tracks:  # another pointmap half (absent otherwise: older caches stay valid)
            payload["pointmap_half"] = "tracks"
        self.compute_dtype, self.tracks = compute_dtype, tracks
        self.fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    @torch.no_grad()
    def no_robot_arm_cond(self, num_frames: int, height: int, width: int) -> torch.Tensor:
        """(20, F, h, 2w): the robot condition of a scene with no robot in view, as the
        generator prepares it for guidance's negative (`RobotCondition.empty`; its points
        are all background, so no normalisation shows)."""
        empty = RobotCondition.empty(num_frames, height, width)
        norm = PointmapNormalization.from_points(empty.pointmap, empty.mask)
        with autocast(self.compute_dtype, self.pipe.device):
            arm = self.pipe.prepare_arm_cond(empty, norm)[0]
        return arm.detach().float().cpu().contiguous()

    @torch.no_grad()
    def encode(self, clip: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        with autocast(self.compute_dtype, self.pipe.device):
            return self._encode(clip)

    def _encode(self, clip: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        pipe = self.pipe
        image = clip["rgb"][0]
        robot = RobotCondition(clip["robot_rgb"], clip["robot_pointmap"].astype(np.float32),
                               clip["robot_mask"])
        norm = clip_normalisation(clip)
        rgb = clip["rgb"].astype(np.float32) / 255.0 * 2.0 - 1.0
        if self.tracks and "tracks" not in clip:
            raise ValueError("a tracks encoder needs the clip's tracks (sample_clip)")
        pm = normalised_scene({**clip, "pointmap": clip["tracks"]} if self.tracks else clip, norm)
        rgb_latent = pipe.encode_video(_to_video(rgb))
        pm_latent = (pipe.encode_video(_to_video(pm)) - POINTMAP_LATENT_MEAN) / POINTMAP_LATENT_STD
        sample = {
            "latents": torch.cat([rgb_latent, pm_latent], dim=-1)[0],
            "condition": pipe.prepare_condition(image)[0],
            "image_embeds": pipe.encode_image(image)[0],
            "arm_cond": pipe.prepare_arm_cond(robot, norm)[0],
            "change": change_map(clip, rgb_latent.shape[3], rgb_latent.shape[4],
                                 pipe.temporal_stride).repeat(1, 1, 1, 2),
        }
        return {k: v.detach().float().cpu().contiguous() for k, v in sample.items()}


@dataclass
class LatentCache:
    """`<uri>/<episode_id>.safetensors`, each with {"fingerprint": ...} metadata."""

    uri: str
    fingerprint: str
    config: object = None

    def __post_init__(self):
        self.uri = uris.normalize(self.uri)
        self.fs, self.path = uris.filesystem(self.uri, self.config)

    def _p(self, episode_id: str) -> str:
        return f"{self.path}/{episode_id}.safetensors"

    def has(self, episode_id: str) -> bool:
        path = self._p(episode_id)
        if not self.fs.exists(path):
            return False
        try:
            head = self.fs.cat_file(path, start=0, end=8)
            (size,) = struct.unpack("<Q", head)
            header = json.loads(self.fs.cat_file(path, start=8, end=8 + size))
        except (OSError, ValueError, struct.error):
            return False  # a damaged object is re-encoded
        return header.get("__metadata__", {}).get("fingerprint") == self.fingerprint

    def save(self, episode_id: str, sample: dict[str, torch.Tensor]) -> None:
        data = save_safetensors(sample, metadata={"fingerprint": self.fingerprint,
                                                  "episode_id": episode_id})
        uris.write_atomic(self.fs, self._p(episode_id), data)

    def load(self, episode_id: str) -> dict[str, torch.Tensor]:
        return load_safetensors(self.fs.cat_file(self._p(episode_id)))

    def write_index(self, episode_ids: list[str], clip: ClipSpec) -> None:
        index = {"fingerprint": self.fingerprint, "episodes": sorted(episode_ids),
                 "clip": [clip.num_frames, clip.height, clip.width]}
        uris.write_atomic(self.fs, f"{self.path}/{INDEX_FILE}",
                          json.dumps(index, indent=2).encode())
