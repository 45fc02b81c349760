"""The motion decoder: a learned stage that redraws a tracks model's decoded motion at full
resolution before frames are drawn from it (`k4d_model.json` extra `motion_decoder:
learned`; issue 45).

A tracks model (`latent_target: tracks`, k4d_model.tracks) samples where each pixel's
surface of frame 0 is at frame t on a latent grid 4x coarser than the image, and the VAE
decodes that grid into soft motion: a moved object's edge drags the table beside it along,
and the object itself moves only part of the way. Frame 0 carried along the ground truth's
tracks scores 0.28x the floor on the objects' pixels; along the same tracks encoded and
decoded by the VAE, 0.47x (benchmarks/demo_model/tracks_ceiling.py). This network sees the
given image, which shows where the objects' edges are, and for each frame t

    inputs (INPUT_CHANNELS = 10), on the [-1, 1] scale of the normalised pointmap
      motion        (3)  the decoded tracks at t minus at frame 0, x MOTION_GAIN
      first points  (3)  the decoded tracks at frame 0 (the sample's estimate of frame 0's points)
      image         (3)  the given frame 0
      first         (1)  1 for frame 0, whose output corrects the first points, else 0
    then, with `MotionDecoderConfig.colour` (COLOUR_CHANNELS = 6 more)
      colour        (3)  the sample's RGB half at t as decoded ([-1, 1]): where the transformer
                         draws the scene at t, which its motion half may not say
      colour change (3)  that less the given image
    outputs (3), x 1 / MOTION_GAIN
      frame t >= 1: a correction to the motion; frame 0: a correction to the first points

Its head starts at zero, so an untrained network passes the decoded tracks through. Its
blocks carry no normalisation: it trains on crops around what moves (most of a frame is
still) and runs on whole frames, and a norm over the crop would see other statistics than
one over the frame. It decides nothing by rule: where a surface goes is its output, learned
from the ground truth's tracks (k4d_trainer.motion_decoder_stage trains it on the model's own
decoded samples of episodes it did not train on).

Stored in the model directory as motion_decoder/config.json + motion_decoder/model.safetensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from k4d.errors import InvalidArgument

from k4d_model.refiner import UNet, load_network, save_network

FOLDER = "motion_decoder"
INPUT_CHANNELS = 10
COLOUR_CHANNELS = 6
OUTPUT_CHANNELS = 3
# Objects move a few hundredths of the normalised scale in a clip: keep the inputs and the
# targets near 1
MOTION_GAIN = 10.0


@dataclass(frozen=True)
class MotionDecoderConfig:
    """The network's shape: k4d_model.refiner.UNet levels, no normalisation (groups 0)."""

    channels: tuple[int, ...] = (32, 64, 96)
    colour: bool = False  # inputs: the sample's RGB half too

    @property
    def inputs(self) -> int:
        return INPUT_CHANNELS + COLOUR_CHANNELS * int(self.colour)

    def __post_init__(self):
        if not self.channels or any(int(c) <= 0 for c in self.channels):
            raise InvalidArgument.for_field("motion_decoder.channels",
                                            "must be positive whole numbers")

    @classmethod
    def from_dict(cls, config: dict) -> MotionDecoderConfig:
        """The inverse of dataclasses.asdict (config.json)."""
        return cls(channels=tuple(int(c) for c in config["channels"]),
                   colour=bool(config.get("colour", False)))


class MotionDecoder(UNet):
    """(N, config.inputs, H, W) -> (N, OUTPUT_CHANNELS, H, W); any H, W."""

    def __init__(self, config: MotionDecoderConfig | None = None):
        config = config or MotionDecoderConfig()
        super().__init__(config.inputs, config.channels, OUTPUT_CHANNELS, groups=0)
        self.config = config
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)


def decoder_inputs(motion: torch.Tensor, first: torch.Tensor, image: torch.Tensor,
                   is_first: torch.Tensor, colour: torch.Tensor | None = None) -> torch.Tensor:
    """(N, H, W, 3) motion and first points (normalised), image ([-1, 1]), (N,) bool and,
    for a network that reads it, the sample's colour (N, H, W, 3) ([-1, 1]) ->
    (N, inputs, H, W)."""
    flag = is_first.to(motion.dtype).view(-1, 1, 1, 1).expand(*motion.shape[:3], 1)
    parts = [motion * MOTION_GAIN, first, image, flag]
    if colour is not None:
        parts += [colour, colour - image]
    return torch.cat(parts, dim=-1).permute(0, 3, 1, 2).contiguous()


@torch.no_grad()
def decode_motion(network: MotionDecoder, tracks: np.ndarray, image: np.ndarray,
                  colour: np.ndarray | None = None) -> np.ndarray:
    """A tracks model's decoded pointmap half (T, H, W, 3), normalised, the given image
    (H, W, 3) uint8 and its decoded RGB half (T, H, W, 3) in [-1, 1] (read by a network
    with `colour`) -> the tracks redrawn (T, H, W, 3) float32: frame 0 the corrected first
    points, frame t those plus the corrected motion."""
    if network.config.colour and colour is None:
        raise ValueError("this motion decoder reads the sample's colour: none was given")
    param = next(network.parameters())
    decoded = torch.from_numpy(np.asarray(tracks, np.float32)).to(param)
    frames = decoded.shape[0]
    first = decoded[:1].expand_as(decoded)
    picture = torch.from_numpy(np.asarray(image, np.float32) / 127.5 - 1.0).to(param)
    is_first = torch.arange(frames, device=param.device) == 0
    drawn = (torch.from_numpy(np.asarray(colour, np.float32)).to(param)
             if network.config.colour else None)
    inputs = decoder_inputs(decoded - first, first, picture[None].expand_as(decoded), is_first,
                            drawn)
    correction = network(inputs).permute(0, 2, 3, 1) / MOTION_GAIN
    first_points = decoded[0] + correction[0]
    motion = decoded - first + correction
    motion[0] = 0.0
    return (first_points[None] + motion).float().cpu().numpy()


def save_motion_decoder(network: MotionDecoder, model_dir: str | Path) -> Path:
    """MODEL_DIR/motion_decoder/ (config.json + model.safetensors)."""
    return save_network(network, model_dir, FOLDER)


def load_motion_decoder(model_dir: str | Path) -> MotionDecoder | None:
    """The motion decoder of a model directory, or None when it has none."""
    return load_network(model_dir, FOLDER,
                        lambda config: MotionDecoder(MotionDecoderConfig.from_dict(config)))
