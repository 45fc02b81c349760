"""Training the motion decoder (k4d_model.motion_decoder) of a tracks model.

1. Pairs. Each episode of a dataset the transformer did not train on is sampled through the
   generator's own pipeline (`Kinema4DPipeline.decoded_sample`, the model's sampler
   settings; episode i with seed `seed` + i), and its decoded pointmap half (the sampled
   tracks, normalised) is stored beside the ground truth's tracks (k4d_trainer.object_flow,
   normalised the same way, from the robot's points) and the given image. Not the
   transformer's training episodes: there it samples better than on anything a user gives
   it, and a decoder trained there would trust the sample too much.
2. Training on crops (`crop` pixels square), most of them around what moves in either the
   sample or the truth (a frame is mostly still). A crop is of frame t >= 1, or of frame 0
   one time in FIRST_FRAME_SHARE. The loss is the L1 error (x MOTION_GAIN) of the redrawn
   motion against the truth's (frame 0: of the first points), over every pixel, weighed
   1 + `moving_weight` where either moves.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from k4d.tool import ToolTrack
from k4d_model.motion_decoder import (
    MOTION_GAIN,
    MotionDecoder,
    MotionDecoderConfig,
    decoder_inputs,
)
from k4d_model.pipeline import Kinema4DPipeline, sample_seed

from k4d_trainer.cascade_stage import rollout_inputs
from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.latents import normalised_scene
from k4d_trainer.object_flow import episode_tracks
from k4d_trainer.tool_condition import episode_camera_pose, episode_tool

FIRST_FRAME_SHARE = 1 / 6
MOVING = 0.005  # normalised units: a pixel moves when its track leaves frame 0 by this much
NEAR_MOVING_SHARE = 0.85  # the share of crops centred near a moving pixel
CROP_JITTER = 16  # pixels: how far from that pixel a crop's centre may lie


def motion_pair(pipe: Kinema4DPipeline, clip: dict[str, np.ndarray], tracks: np.ndarray,
                seed: int, tool: ToolTrack | None = None,
                T_cam_from_base: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """One episode's pair: `decoded` (T, H, W, 3) float16, the sampled tracks as decoded;
    `target` the same of the truth's `tracks` (metres); `image` frame 0 (H, W, 3) uint8;
    `colour` (T, H, W, 3) float16, the sample's RGB half as decoded ([-1, 1]).
    Both normalised as the generator normalises a rollout (from the robot's points)."""
    image, robot, norm = rollout_inputs(clip)
    colour, decoded = pipe.decoded_sample(image, robot, norm, seed=sample_seed(seed, 0),
                                          tool=tool, T_cam_from_base=T_cam_from_base)
    target = normalised_scene({**clip, "pointmap": tracks}, norm)
    return {"decoded": decoded.astype(np.float16), "target": target.astype(np.float16),
            "image": image, "colour": colour.astype(np.float16)}


def sample_pairs(pipe: Kinema4DPipeline, dataset, episode_ids: Sequence[str], clip: ClipSpec,
                 store: Path, seed: int, log: Callable[[str], None] = print
                 ) -> list[dict[str, np.ndarray]]:
    """motion_pair of each episode (episode i of `episode_ids` with seed `seed` + i), each
    stored as STORE/<episode>.npz: a resumed call samples only the episodes still missing.
    The store belongs to one model: its pairs are that model's samples."""
    store.mkdir(parents=True, exist_ok=True)
    pairs, started = [], time.monotonic()
    for index, episode_id in enumerate(episode_ids):
        path = store / f"{episode_id}.npz"
        if not path.is_file():
            episode = dataset.open(episode_id)
            pair = motion_pair(pipe, read_clip(episode, clip), episode_tracks(episode, clip),
                               seed + index,
                               episode_tool(episode, clip) if pipe.reads_tool else None,
                               episode_camera_pose(episode) if pipe.reads_tool else None)
            partial = path.with_suffix(".partial.npz")
            np.savez(partial, **pair)
            partial.replace(path)  # whole or absent: an interrupted write is sampled again
        with np.load(path) as data:
            pairs.append(dict(data))
        if (index + 1) % 16 == 0 or index + 1 == len(episode_ids):
            log(f"motion decoder: {index + 1}/{len(episode_ids)} pairs "
                f"({time.monotonic() - started:.0f} s)")
    return pairs


class _Crops:
    """Random training crops of a list of pairs."""

    def __init__(self, pairs: Sequence[dict[str, np.ndarray]], crop: int, seed: int,
                 colour: bool = False):
        self.pairs, self.crop, self.colour = pairs, crop, colour
        self.rng = np.random.default_rng(seed)
        frames, height, width = pairs[0]["decoded"].shape[:3]
        if crop > min(height, width):
            raise ValueError(f"crop {crop} is larger than the frames ({height}x{width})")
        self.frames, self.height, self.width = frames, height, width
        self.moving = [[self._moving(p, t) for t in range(frames)] for p in pairs]

    @staticmethod
    def _moving(pair: dict[str, np.ndarray], t: int) -> np.ndarray:
        if t == 0:
            return np.zeros((0, 2), int)
        moved = np.zeros(pair["decoded"].shape[1:3], bool)
        for key in ("decoded", "target"):
            tracks = pair[key]
            moved |= np.abs(tracks[t].astype(np.float32) - tracks[0]).max(-1) > MOVING
        return np.argwhere(moved)

    def one(self) -> tuple[np.ndarray, ...]:
        rng, size = self.rng, self.crop
        index = int(rng.integers(len(self.pairs)))
        t = 0 if rng.random() < FIRST_FRAME_SHARE else int(rng.integers(1, self.frames))
        near = self.moving[index][t]
        if len(near) and rng.random() < NEAR_MOVING_SHARE:
            centre = near[rng.integers(len(near))] + rng.integers(-CROP_JITTER, CROP_JITTER + 1, 2)
        else:
            centre = (rng.integers(self.height), rng.integers(self.width))
        top = int(np.clip(centre[0] - size // 2, 0, self.height - size))
        left = int(np.clip(centre[1] - size // 2, 0, self.width - size))
        window = (slice(top, top + size), slice(left, left + size))
        pair = self.pairs[index]
        decoded, target = pair["decoded"], pair["target"]
        crops = (decoded[t][window].astype(np.float32), decoded[0][window].astype(np.float32),
                 target[t][window].astype(np.float32), target[0][window].astype(np.float32),
                 pair["image"][window].astype(np.float32) / 127.5 - 1.0, t == 0)
        if self.colour:
            crops += (pair["colour"][t][window].astype(np.float32),)
        return crops

    def batch(self, size: int) -> list[torch.Tensor]:
        crops = [self.one() for _ in range(size)]
        return [torch.from_numpy(np.stack(part)) for part in zip(*crops, strict=True)]


def decoder_loss(network: MotionDecoder, batch: list[torch.Tensor], moving_weight: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of one batch of crops, and the same loss of the decoded tracks as they are
    (an untrained network's: the mark to beat)."""
    decoded, first, target, target_first, image, is_first, *colour = batch
    motion, true_motion = decoded - first, target - target_first
    inputs = decoder_inputs(motion, first, image, is_first, colour[0] if colour else None)
    correction = network(inputs).permute(0, 2, 3, 1)
    moving = ((motion.abs().amax(-1) > MOVING) | (true_motion.abs().amax(-1) > MOVING)).float()
    weight = 1.0 + moving_weight * moving
    on_first = is_first.float().view(-1, 1, 1)

    def error(correction):
        motion_error = (motion * MOTION_GAIN + correction - true_motion * MOTION_GAIN).abs()
        first_error = (first * MOTION_GAIN + correction - target_first * MOTION_GAIN).abs()
        per_pixel = (1 - on_first) * motion_error.mean(-1) + on_first * first_error.mean(-1)
        return (per_pixel * weight).mean()

    return error(correction), error(torch.zeros_like(correction)).detach()


def train_motion_decoder(pairs: Sequence[dict[str, np.ndarray]], steps: int,
                         config: MotionDecoderConfig | None = None, batch_size: int = 16,
                         crop: int = 48, lr: float = 1e-3, moving_weight: float = 10.0,
                         seed: int = 0, log: Callable[[str], None] = print,
                         log_every: int = 100) -> tuple[MotionDecoder, list[dict]]:
    """A motion decoder trained on `pairs` (motion_pair's) for `steps` steps (AdamW at `lr`, a
    warm-up over the first 5 % of the steps, then a cosine decay), and per step its loss beside the decoded tracks'."""
    if not pairs:
        raise ValueError("no pairs to train the motion decoder on")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    config = config or MotionDecoderConfig()
    if config.colour and any("colour" not in pair for pair in pairs):
        raise ValueError("a motion decoder that reads the sample's colour needs pairs stored "
                         "with it (`colour`): sample them again")
    torch.manual_seed(seed)
    network = MotionDecoder(config).train()
    optimizer = torch.optim.AdamW(network.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    crops, history, started = _Crops(pairs, crop, seed, config.colour), [], time.monotonic()
    for step in range(1, steps + 1):
        loss, as_decoded = decoder_loss(network, crops.batch(batch_size), moving_weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        history.append({"step": step, "loss": loss.item(), "decoded_loss": as_decoded.item()})
        if step % log_every == 0 or step == steps:
            recent = history[-log_every:]
            log(f"motion decoder: step {step}/{steps} loss "
                f"{np.mean([h['loss'] for h in recent]):.4f} (the decoded tracks as they are "
                f"{np.mean([h['decoded_loss'] for h in recent]):.4f}), "
                f"{time.monotonic() - started:.0f} s")
    return network.eval(), history
