"""The sample refiner: a learned cascade stage that redraws the transformer's decoded sample
at full resolution (issue 45: "a learned stage that refines the decoded sample").

The transformer samples the change from frame 0 on a latent grid 4x coarser than the image,
and its 8-step sample is noisy: where nothing moved, the decoded change is a few levels of
grain, and an object's edges are soft. This network reads, per frame t >= 1, only the given
image and what the transformer sampled, and writes frame t's change from frame 0:

    inputs (SAMPLE_CHANNELS = 12), on the [-1, 1] scale of the image and the pointmap
      image          (3)  the given frame 0
      rgb change     (3)  D(z)_t - R_t: the decoded sample less the decoder's static clip
      point change   (3)  P_t - P_0 of the decoded pointmap, x POINT_GAIN
      first points   (3)  P_0, the sample's own frame-0 pointmap
    then, with `CascadeConfig.context` = k > 0, for each offset d = 1..k
      rgb, point change at t - d and at t + d (12), clamped to frames 1..T-1
    then, with `CascadeConfig.samples` = K > 1 (K independent samples of one rollout: the
    change and first points above are their mean)
      spread         (6)  the standard deviation over the K samples of the rgb and point change
    outputs (6)
      rgb change     (3)  frame t's colour minus frame 0's
      point change   (3)  frame t's points minus frame 0's, x POINT_GAIN (normalised units)
    then, with `CascadeConfig.warp` (9 outputs)
      flow           (2)  where in frame 0 frame t's pixel comes from: (dx, dy) in pixels
                          / FLOW_SCALE (a backward flow)
      warp weight    (1)  a logit: how much of frame t's colour is frame 0 warped along the
                          flow, against the network's own colour change above
    with `CascadeConfig.matching` (warp too), the U-Net also reads (3 more inputs)
      matched flow   (2)  FlowMatcher's flow / FLOW_SCALE (below)
      confidence     (1)  the match's largest probability
    and its flow output is a correction added to the matched flow
    then, with `CascadeConfig.gate` (one more output, always the last)
      change gate    (1)  a logit: whether frame t's pixel changed from frame 0 at all; the
                          colour and point change above are multiplied by its sigmoid

Its head starts at zero, so an untrained network draws no change (frame 0 in every frame)
and learns what of the sample to show. `CascadeConfig.residual` adds the sample's own
change to the output instead (an untrained network passes the sample through): measured on
validation, that network kept much of the sample's grain, because cancelling a large noisy
input is harder to learn than passing a small clean one (models/demo-small/README.md).

The neighbouring frames (`context`) are further draws of the same scene change: where an
object really moves, the sample changes consistently from frame to frame, while its grain
does not, so a network that sees them can keep the one and drop the other. Independent samples
(`samples`, other noise seeds) are draws that do not share the sample's noise: where they
agree the change is sure, where they scatter it is the sampler's guess.

With `warp`, the colour the network returns is a blend the network weighs per pixel:
frame 0 sampled at the predicted flow (bilinear; an object keeps its look where it is drawn
again) and its own colour change (what no pixel of frame 0 shows: the table an object
uncovered). The flow is a network output like the colour; training supervises it with the
ground truth's object motion (k4d_trainer.object_flow), and with that alone: the colour's
error trains the blend and the colour, but reaches the flow only through the shared layers.
Through the warp, the colour's gradient sees only a pixel or two around each flow, and on
flat-coloured objects it is mostly noise: in a first try that let it through (200 steps on
the demo's rollouts), the flow's training error stayed at or above that of no flow at all. At zero flow the warp is frame 0, so
an untrained network still draws no change.

With `matching`, the flow starts from a global match (FlowMatcher), as optical-flow
networks that match features over the whole image do (GMFlow, arXiv 2111.13680): each cell
of frame t's sampled look (frame 0 plus the sample's colour and point change), on a grid 4x
coarser than the image, is compared with every cell of frame 0, and its flow is the
softmax-weighted mean of where frame 0's cells lie, less where it lies. Objects move tens of
pixels in a clip (median 19, 90th percentile 70 on the demo's validation episodes), further
than a U-Net learned to regress: measured, its flow ended 31 px off against 36 px for no
flow. A match needs only features that tell an object's look apart, wherever it went. A
learned penalty on the squared distance breaks ties between look-alike cells in favour of
the nearer one. The matcher learns from the flow targets alone, as the flow does. An
untrained matcher's flow is not zero (a near-uniform mean of positions), so an untrained
matching network warps frame 0 along it at weight 1/2. Nor is a trained one's on
featureless cells, even where frame t's look is frame 0's (on the table, about 24 px on
the demo's rollouts): the U-Net's weight keeps the warp off where the match says nothing.

With `gate`, the network also says where the scene changed. Trained on the squared error
alone, it answers an unsure pixel with a small change, and the transformer's 8-step sample
is unsure nearly everywhere: where nothing moved the output keeps a few levels of grain
(the static region 39.6 dB on validation, where copying frame 0 there is exact). The gate
is a classifier of change, trained with a cross-entropy against the ground truth's changed
pixels (k4d_trainer.cascade_stage): where it is sure nothing changed, the change it lets
through is near 0. What changed is the network's call from the image and the sample, as the
colour is: no threshold or rule decides it at generation. An untrained gate is 1/2 on a zero
change, so an untrained network still draws no change.

It does not read the robot condition: where and how the scene moves has to come from the
sample (the ablation that replaces the sample by frame 0 must still change the output).
The robot's own pixels and points are composited from kinematics after it, as before.

Trained by `k4d train`'s `cascade` section (k4d_trainer.cascade_stage) on rollouts the
trained transformer sampled on episodes it never trained on; stored in the model directory
as cascade/config.json + cascade/model.safetensors; used when the model's `cascade` option
is "sample" (k4d_model.options).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from k4d_model.options import MAX_CASCADE_SAMPLES
from k4d_model.refiner import UNet, load_network, save_network

FOLDER = "cascade"
SAMPLE_CHANNELS = 12
CHANGE_CHANNELS = 6  # a frame's sampled rgb and point change: what each neighbour adds
OUTPUT_CHANNELS = 6
WARP_CHANNELS = 3  # flow (2) and the warp's weight (1), after the 6 outputs
MATCH_CHANNELS = 3  # the matched flow (2) and its confidence (1), read by the U-Net
GATE_CHANNELS = 1  # the change gate's logit, the last output
# Objects move tens of pixels in a clip: the flow is output in units of FLOW_SCALE pixels so
# that its targets are near 1, as the colour's are.
FLOW_SCALE = 16.0
# Point changes are a few hundredths of the normalised range: scaled up so that the
# network's inputs and targets are near 1, as its colour ones are.
POINT_GAIN = 10.0


@dataclass(frozen=True)
class CascadeConfig:
    """A U-Net with one level per entry of `channels` (each but the last halves the
    resolution), two 3x3 convolutions per level."""

    channels: tuple[int, ...] = (32, 64, 96)
    groups: int = 8
    residual: bool = False  # the output is added to the sample's own change
    context: int = 0  # neighbouring frames each side whose sampled change is also read
    samples: int = 1  # independent samples of the rollout read (their mean and spread)
    warp: bool = False  # the colour blends frame 0 warped along a predicted flow (above)
    matching: int = 0  # > 0: the flow starts from a global match on features this wide
    gate: bool = False  # a last output gates the colour and point change (above)

    def __post_init__(self):
        if not 1 <= self.samples <= MAX_CASCADE_SAMPLES:
            raise ValueError(f"cascade samples must be in 1..{MAX_CASCADE_SAMPLES}, got "
                             f"{self.samples}")
        if self.matching < 0 or (self.matching and not self.warp):
            raise ValueError(f"cascade matching must be 0, or > 0 with warp; got "
                             f"{self.matching} (warp {self.warp})")

    @property
    def sample_inputs(self) -> int:
        """The channels sample_inputs makes (the U-Net reads the match's too)."""
        spread = CHANGE_CHANNELS if self.samples > 1 else 0
        return SAMPLE_CHANNELS + 2 * self.context * CHANGE_CHANNELS + spread

    @property
    def inputs(self) -> int:
        return self.sample_inputs + (MATCH_CHANNELS if self.matching else 0)

    @property
    def outputs(self) -> int:
        return (OUTPUT_CHANNELS + (WARP_CHANNELS if self.warp else 0)
                + (GATE_CHANNELS if self.gate else 0))

    @classmethod
    def from_dict(cls, config: dict) -> CascadeConfig:
        return cls(channels=tuple(int(c) for c in config.get("channels", cls.channels)),
                   groups=int(config.get("groups", cls.groups)),
                   residual=bool(config.get("residual", cls.residual)),
                   context=int(config.get("context", cls.context)),
                   samples=int(config.get("samples", cls.samples)),
                   warp=bool(config.get("warp", cls.warp)),
                   matching=int(config.get("matching", cls.matching)),
                   gate=bool(config.get("gate", cls.gate)))


class FlowMatcher(nn.Module):
    """(first, current) look, each (N, 6, H, W) (colour and points on the [-1, 1] scale) ->
    backward flow (N, 2, H, W) in pixels and confidence (N, 1, H, W): for each cell of
    `current` on a grid 4x coarser (the encoder's two stride-2 convolutions: a latent cell's
    size), where in `first` it lies (module docstring), upsampled bilinearly to the image."""

    def __init__(self, features: int, groups: int = 8):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(6, 32, 3, padding=1), nn.GroupNorm(groups, 32), nn.SiLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.GroupNorm(groups, 64), nn.SiLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.GroupNorm(groups, 64), nn.SiLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.GroupNorm(groups, 64), nn.SiLU(),
            nn.Conv2d(64, features, 1))
        # softplus(locality) is the logits' penalty per squared FLOW_SCALE pixels of distance;
        # it starts weak (0.05): a strong start keeps every match near its cell (measured)
        self.locality = nn.Parameter(torch.tensor(-3.0))

    def forward(self, first: torch.Tensor, current: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        size = first.shape[-2:]
        keys, queries = self.encoder(first), self.encoder(current)
        n, d, h, w = keys.shape
        # cell centres in image pixels: the flow is a difference of them
        ys = (torch.arange(h, dtype=keys.dtype, device=keys.device) + 0.5) * (size[0] / h) - 0.5
        xs = (torch.arange(w, dtype=keys.dtype, device=keys.device) + 0.5) * (size[1] / w) - 0.5
        grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1).reshape(h * w, 2)
        logits = queries.flatten(2).transpose(1, 2) @ keys.flatten(2) / d ** 0.5
        distance = torch.cdist(grid, grid) ** 2 / FLOW_SCALE ** 2
        prob = torch.softmax(logits - F.softplus(self.locality) * distance, dim=-1)
        flow = (prob @ grid - grid).transpose(1, 2).reshape(n, 2, h, w)
        confidence = prob.amax(dim=-1).reshape(n, 1, h, w)
        return (F.interpolate(flow, size=size, mode="bilinear", align_corners=False),
                F.interpolate(confidence, size=size, mode="bilinear", align_corners=False))


def matcher_looks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame 0's look and frame t's sampled look, (N, 6, H, W) each, from sample_inputs'
    channels: the image and its points; the image plus the sampled colour change and the
    points plus the sampled point change."""
    image, rgb_change, point_change, points = x[:, :3], x[:, 3:6], x[:, 6:9], x[:, 9:12]
    return (torch.cat([image, points], dim=1),
            torch.cat([image + rgb_change, points + point_change / POINT_GAIN], dim=1))


class SampleRefiner(UNet):
    """(N, config.sample_inputs, H, W) (sample_inputs') -> (N, config.outputs, H, W); any
    H, W. With `warp`, the first 3 outputs are the blended colour change, and the next 3
    after the point change the flow and the logit of the warp's weight the blend used; with
    `matching` the flow is the matched one plus the U-Net's correction; with `gate` the
    colour and point change are gated and the last output is the gate's logit."""

    def __init__(self, config: CascadeConfig | None = None):
        config = config or CascadeConfig()
        super().__init__(config.inputs, config.channels, config.outputs, config.groups)
        self.config = config
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.matcher = FlowMatcher(config.matching, config.groups) if config.matching else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        matched = None
        if self.matcher is not None:
            matched, confidence = self.matcher(*matcher_looks(x))
            matched = matched / FLOW_SCALE
            # the U-Net reads the match, but its colour error does not train the matcher
            x = torch.cat([x, matched.detach(), confidence.detach()], dim=1)
        out = super().forward(x)
        if matched is not None:
            out = torch.cat([out[:, :6], out[:, 6:8] + matched, out[:, 8:]], dim=1)
        if self.config.residual:
            out = torch.cat([out[:, :6] + x[:, 3:9], out[:, 6:]], dim=1)  # the sample's change
        if self.config.warp:
            flow, weight = out[:, 6:8], torch.sigmoid(out[:, 8:9])
            image = x[:, :3]
            # the flow learns from its own targets alone (the colour's error trains the blend)
            warped = backward_warp(image, flow.detach() * FLOW_SCALE) - image
            colour = weight * warped + (1.0 - weight) * out[:, :3]
            out = torch.cat([colour, out[:, 3:]], dim=1)
        if self.config.gate:
            gate = torch.sigmoid(out[:, -1:])
            out = torch.cat([gate * out[:, :6], out[:, 6:]], dim=1)
        return out


def backward_warp(image: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """image (N, C, H, W) sampled bilinearly at each pixel plus flow (N, 2, H, W), (dx, dy) in
    pixels; outside the image the border pixel."""
    n, _, h, w = image.shape
    ys, xs = torch.meshgrid(torch.arange(h, dtype=flow.dtype, device=flow.device),
                            torch.arange(w, dtype=flow.dtype, device=flow.device), indexing="ij")
    x = (xs + flow[:, 0]) * (2.0 / max(w - 1, 1)) - 1.0
    y = (ys + flow[:, 1]) * (2.0 / max(h - 1, 1)) - 1.0
    grid = torch.stack([x, y], dim=-1)
    return F.grid_sample(image, grid, mode="bilinear", padding_mode="border", align_corners=True)


def sample_inputs(image: np.ndarray, rgb: np.ndarray, reference: np.ndarray,
                  pointmap: np.ndarray, context: int = 0, samples: int = 1) -> torch.Tensor:
    """(T - 1, CascadeConfig(context=context, samples=samples).sample_inputs, H, W) float32 for
    frames t >= 1.

    image (H, W, 3) uint8; rgb (T, H, W, 3) the decoded sample, or (samples, T, H, W, 3)
    independent samples, and reference (T, H, W, 3) the decoder's static clip, in [-1, 1];
    pointmap the decoded pointmap(s) in [-1, 1], shaped as rgb."""
    rgb, pointmap = np.asarray(rgb, np.float32), np.asarray(pointmap, np.float32)
    if rgb.ndim == 4:
        rgb, pointmap = rgb[None], pointmap[None]
    if rgb.shape[0] != samples or pointmap.shape != rgb.shape:
        raise ValueError(f"the network reads {samples} sample(s); got rgb {rgb.shape} and "
                         f"pointmap {pointmap.shape}")
    frames = rgb.shape[1] - 1
    first = torch.from_numpy(np.asarray(image, np.float32) / 127.5 - 1.0).permute(2, 0, 1)
    rgb_change = torch.from_numpy(rgb[:, 1:] - np.asarray(reference[1:], np.float32))
    points = torch.from_numpy(pointmap)
    point_change = (points[:, 1:] - points[:, :1]) * POINT_GAIN
    each = torch.cat([rgb_change, point_change], dim=-1).permute(0, 1, 4, 2, 3)
    change, points = each.mean(dim=0), points.mean(dim=0)
    neighbours = []
    for offset in range(1, context + 1):
        for sign in (-1, 1):
            index = (torch.arange(frames) + sign * offset).clamp(0, frames - 1)
            neighbours.append(change[index])
    spread = [each.std(dim=0, correction=0)] if samples > 1 else []
    return torch.cat([first[None].expand(frames, -1, -1, -1), change,
                      points[:1].permute(0, 3, 1, 2).expand(frames, -1, -1, -1), *neighbours,
                      *spread], dim=1).contiguous()


@torch.no_grad()
def refine_sample(network: SampleRefiner, image: np.ndarray, rgb: np.ndarray,
                  reference: np.ndarray, pointmap: np.ndarray, scale: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The refined change of frames t >= 1: colour in levels (T - 1, H, W, 3) float32 (frame t
    = image + this) and points in metres (T - 1, H, W, 3) (frame t = frame 0's points + this);
    `scale`: metres per normalised unit (k4d_model.conditions.PointmapNormalization); rgb
    and pointmap as sample_inputs takes them (stacked when the network reads several)."""
    param = next(network.parameters())
    x = sample_inputs(image, rgb, reference, pointmap, network.config.context,
                      network.config.samples)
    x = x.to(param.device, param.dtype)
    out = network(x).float().permute(0, 2, 3, 1).cpu().numpy()
    return out[..., :3] * 127.5, out[..., 3:6] * (scale / POINT_GAIN)


def save_cascade(network: SampleRefiner, model_dir: str | Path) -> Path:
    """MODEL_DIR/cascade/ (config.json + model.safetensors)."""
    return save_network(network, model_dir, FOLDER)


def load_cascade(model_dir: str | Path) -> SampleRefiner | None:
    """The sample refiner of a model directory, or None when it has none."""
    return load_network(model_dir, FOLDER,
                        lambda config: SampleRefiner(CascadeConfig.from_dict(config)))
