"""Judging the transformer stage's progress by samples, not loss (issue 45).

Raw loss is a poor progress signal: it averages over every noise level, where the sampler
queries a few, and says little about what a sample looks like. So every
`training.sample_every` steps (and at the last step) rank 0 takes the first
`training.sample_episodes` episodes of `training.sample_uri` (default `vae.heldout_uri`;
the same episodes all run) and, with the weights being trained:

- `x0_error_sigma1`: the transformer's x0 prediction from pure noise at sigma = 1
  (x0 = x_t - sigma v = eps - v) against the clean sample the loss trains towards (the
  latents, or their change from frame 0 with `training.latent_target: change`), the mean
  squared error per element, averaged over the episodes; `x0_error_sigma1_zero`, the error
  of predicting zero, is its reference; `x0_error_sigma1_changed` (beside
  `x0_error_sigma1_changed_zero`) the same on the latent cells that change from frame 0
  (frames t >= 1, both halves; None when no episode has one): below its zero, the
  transformer predicts some of the reaction from its conditions alone;
- with `latent_target: tracks`, `x0_error_still_motion`: the same x0 error at the noise
  level of the sampler's last query (`still_motion_sigma`: 0.30 for the demo's 8 UniPC steps
  at shift 3; what it predicts there the sample keeps) on the pointmap half's cells that do
  not change, frames t >= 1, in unscaled motion; beside `x0_error_still_motion_zero`. Above
  it, the transformer moves still surfaces;
- `sample_psnr_db`: one full sampling run per episode through `Kinema4DPipeline`, the sampler
  users get, with the model's own settings (num_inference_steps, flow shift, guidance) on
  the trainer's in-memory components; its RGB, decoded, against the VAE's reconstruction of
  the ground truth (the decoded latents of the clip), over frames t >= 1, in dB of 0-255
  pixels (the episodes' pooled squared error); `sample_static_psnr_db` the same over the
  pixels whose ground truth does not change from frame 0 (the evaluator's `static` region:
  `k4d_tabletop.scene_change`, outside the robot in frame t and in frame 0).

The model's output options (`model.fidelity`) are left out: the figures are the decoded
sample's own. Each measurement is a `kind: "sample"` line in metrics.jsonl, one log line
with the seconds it took, and RUN/samples/step-XXXXXXXX.png (per episode the rows ground
truth, VAE reconstruction, sample for a few frames). The cost is one sampling run per
episode (num_inference_steps transformer passes and a decode) and one transformer pass.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass

import numpy as np
import torch
from k4d.errors import InvalidArgument, NotFound
from k4d.tool import ToolTrack
from k4d_model.checkpoints import ModelComponents
from k4d_model.conditions import PointmapNormalization
from k4d_model.lora import LoraLayer, LoraWeights, fuse_lora
from k4d_model.options import LATENT_TARGET_TRACKS
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.results import GenerationResult, RobotCondition

from k4d_trainer import model as model_lib
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import DataSection, TrainConfig
from k4d_trainer.data import open_source, select_episodes
from k4d_trainer.latents import SampleEncoder, changed_pixels, clip_normalisation, sample_clip
from k4d_trainer.objective import clean_sample
from k4d_trainer.parallel import DistInfo, autocast, autocast_dtype, stage_dtype
from k4d_trainer.runs import SAMPLE_KIND, RunDir
from k4d_trainer.tool_condition import (
    TOOL_KEY,
    clip_tool_features,
    episode_camera_pose,
    episode_tool,
)
from k4d_trainer.vae import psnr_of_mse

SIGMA_ONE_TIMESTEP = 1000.0  # the 1000-step flow-matching schedule's first timestep: sigma 1
X0_HALVES = ("rgb", "pointmap")
PICTURE_FRAMES = 4           # frames per episode in the picture, evenly spread
PICTURE_TILE_HEIGHT = 96     # larger frames are shrunk to this height in the picture
SAMPLES_FOLDER = "samples"


@dataclass
class ProgressEpisode:
    """An episode measured at every measurement, prepared once (rank 0)."""

    episode_id: str
    rgb: np.ndarray                  # (T, H, W, 3) uint8 ground truth; rgb[0] is the image
    robot: RobotCondition
    norm: PointmapNormalization
    sample: dict[str, torch.Tensor]  # the training sample (k4d_trainer.latents), CPU
    reconstruction: np.ndarray       # (T, H, W, 3) float32 in [-1, 1]: the VAE's, decoded
    static: np.ndarray               # (T, H, W) bool: unchanged from frame 0, off the robot
    tool: ToolTrack | None = None    # the gripper's state, when the transformer reads it
    camera_pose: np.ndarray | None = None  # (4, 4) T_cam_from_base, with the tool


class TrainedDenoiser:
    """The transformer being trained as the pipeline's backend, under the run's autocast."""

    def __init__(self, transformer: torch.nn.Module, compute_dtype: torch.dtype | None,
                 device: torch.device):
        self.model, self.compute_dtype, self.device = transformer, compute_dtype, device

    @torch.no_grad()
    def __call__(self, hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain,
                 tool_cond=None):
        with autocast(self.compute_dtype, self.device):
            return self.model(hidden_states, timestep, image_embeds, arm_cond,
                              arm_latent_gain.to(self.device), return_dict=False,
                              tool_cond=tool_cond)[0].float()

    def describe(self) -> dict:
        return {"backend": "trainer", "autocast": str(self.compute_dtype)}


class SampleProgress:
    """`due(step)` on every rank; `measure(transformer, step)` on rank 0 -> the figures."""

    def __init__(self, config: TrainConfig, components: ModelComponents, clip: ClipSpec,
                 dist: DistInfo, run: RunDir, env_config=None):
        training = config.training
        self.every, self.total_steps = training.sample_every, training.steps
        self.latent_target, self.motion_scale = training.latent_target, training.motion_scale
        self.tracks = training.latent_target == LATENT_TARGET_TRACKS
        self.still_sigma = (last_query_sigma(components.scheduler,
                                             components.info.num_inference_steps)
                            if self.every and self.tracks else None)
        self.seed, self.uri = config.seed, config.sample_uri
        self.components, self.clip, self.dist, self.run = components, clip, dist, run
        self.compute_dtype = autocast_dtype(config.model.precision, dist.device)
        self.stage_dtype = stage_dtype(config.model.precision, dist.device)
        self.episodes: list[ProgressEpisode] | None = None  # read at the first measurement
        self.dataset, self.episode_ids = None, []
        if self.every:  # a bad dataset fails now, on every rank, not after sample_every steps
            self.dataset, self.episode_ids = _open_episodes(
                self.uri, training.sample_episodes, clip, config.data.max_upscale, env_config)

    def due(self, step: int) -> bool:
        return self.every > 0 and (step % self.every == 0 or step == self.total_steps)

    @torch.no_grad()
    def measure(self, transformer: torch.nn.Module, step: int) -> dict:
        """Rank 0: the figures of the module's current weights as one metrics line; writes
        the picture. The module's train/eval mode is restored."""
        started = time.perf_counter()
        device = self.dist.device
        was_training = transformer.training
        transformer.eval()
        try:
            pipe = self._pipeline(transformer)
            if self.episodes is None:
                self.episodes = [self._prepare(pipe, eid) for eid in self.episode_ids]
            x0 = [x0_errors(transformer, e.sample, self.seed + i, self.latent_target,
                            self.compute_dtype, device, self.motion_scale)
                  for i, e in enumerate(self.episodes)]
            still = [still_motion_errors(transformer, e.sample, self.seed + i,
                                         self.latent_target, self.still_sigma,
                                         self.compute_dtype, device, self.motion_scale)
                     for i, e in enumerate(self.episodes)] if self.tracks else None
            results = [_sample(pipe, e, self.seed + i) for i, e in enumerate(self.episodes)]
        finally:
            transformer.train(was_training)
            if device.type != "cpu":  # the training loop keeps the encoders off the GPU
                self.components.vae.cpu()
                self.components.image_encoder.cpu()
        samples = [result.rgb for result in results]
        figures = sample_figures(self.episodes, samples, x0, still)
        if still is not None:
            figures["still_motion_sigma"] = round(self.still_sigma, 4)
        self.run.write_bytes(f"{SAMPLES_FOLDER}/step-{step:08d}.png",
                             progress_picture(self.episodes, samples))
        # where the time went: the pipeline's own phases, summed over the episodes
        phases = {phase: round(sum(r.metadata["timings_s"][phase] for r in results), 3)
                  for phase in ("conditioning", "denoising", "decoding")}
        return {"kind": SAMPLE_KIND, "step": step, **figures,
                "episodes": len(self.episodes), "seconds": time.perf_counter() - started,
                "sampling_s": phases}

    def _pipeline(self, transformer: torch.nn.Module) -> Kinema4DPipeline:
        """The generator's sampler on the in-memory components, without the output options
        (the latent target and the VAE's decoding stay: they are how the sample reads)."""
        components = model_lib.sampling_components(self.components, transformer)
        self.components.vae.eval()
        backend = TrainedDenoiser(transformer, self.compute_dtype, self.dist.device)
        return Kinema4DPipeline(components, backend, device=str(self.dist.device),
                                model_id="trainer-progress")

    def _prepare(self, pipe: Kinema4DPipeline, episode_id: str) -> ProgressEpisode:
        episode = self.dataset.open(episode_id)
        clip = sample_clip(episode, self.clip, self.tracks)
        encoder = SampleEncoder(pipe.components, pipe.device, self.stage_dtype, self.tracks)
        sample = encoder.encode(clip)
        tool = pose = None
        if pipe.reads_tool:
            tool, pose = episode_tool(episode, self.clip), episode_camera_pose(episode)
            sample[TOOL_KEY] = clip_tool_features(tool, self.clip, pipe.temporal_stride,
                                                  pipe.tool_features, episode, clip)
        reconstruction, _ = pipe.decode_float(sample["latents"][None].to(pipe.device))
        robot_mask = np.asarray(clip["robot_mask"], dtype=bool)
        static = ~changed_pixels(clip) & ~robot_mask & ~robot_mask[:1]
        robot = RobotCondition(clip["robot_rgb"], clip["robot_pointmap"].astype(np.float32),
                               robot_mask)
        return ProgressEpisode(episode_id, clip["rgb"], robot, clip_normalisation(clip),
                               sample, reconstruction, static, tool, pose)


def _open_episodes(uri: str, count: int, clip: ClipSpec, max_upscale: float, env_config
                   ) -> tuple[object, list[str]]:
    """The dataset and its first `count` episodes, checked against the clip; a problem is
    InvalidArgument naming training.sample_uri."""
    try:
        dataset = open_source(DataSection(uri=uri), env_config)
        section = DataSection(uri=uri, max_episodes=count, max_upscale=max_upscale)
        return dataset, select_episodes(dataset, section, clip)
    except (InvalidArgument, NotFound) as exc:
        raise InvalidArgument.for_field("training.sample_uri", f"{uri}: {exc}") from None


def sampling_transformer(components: ModelComponents, dist: DistInfo, lora_alpha: float
                         ) -> torch.nn.Module | None:
    """Every rank: the weights being trained as a module rank 0 can sample alone. Without
    sharding that is the transformer itself (DDP's replicas share its parameters); under
    FSDP2 its full state is gathered as publishing does (k4d_trainer.publish) into a plain
    copy on rank 0, the LoRA fused at the trainer's scale alpha / r. None on other ranks."""
    if dist.dp_shard <= 1:
        return components.transformer
    from k4d_trainer.publish import full_model_state, split_lora

    state = full_model_state(components.transformer)
    if not dist.is_main:
        return None
    plain, layers = split_lora(state, 0)
    model = model_lib.unwrapped(components, plain, device="cpu").transformer
    if layers:
        lora = LoraWeights({m: LoraLayer(m, down, up) for m, (down, up) in layers.items()},
                           alpha=lora_alpha)
        fuse_lora(model, lora, lora_scale=1.0)
    return model.to(dist.device)


@torch.no_grad()
def predict_x0(transformer: torch.nn.Module, sample: dict[str, torch.Tensor], seed: int,
               latent_target: str, sigma: float, compute_dtype: torch.dtype | None,
               device: torch.device, motion_scale: float = 1.0
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the x0 the transformer predicts from the clean sample noised to `sigma` with a seeded
    draw, that clean sample), both (1, 16, F, h, 2w) on the CPU. The flow-matching
    schedule's timestep of a noise level is 1000 sigma, whatever its shift."""
    x = clean_sample(sample["latents"][None], latent_target, motion_scale)
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    x_t = (1.0 - sigma) * x + sigma * eps
    model_input = torch.cat([x_t, sample["condition"][None]], dim=1)
    timestep = torch.full((1,), SIGMA_ONE_TIMESTEP * sigma, device=device)
    tool = {} if TOOL_KEY not in sample else {"tool_cond": sample[TOOL_KEY][None].to(device)}
    with autocast(compute_dtype, device):
        velocity = transformer(model_input.to(device), timestep,
                               sample["image_embeds"][None].to(device),
                               sample["arm_cond"][None].to(device), return_dict=False,
                               **tool)[0]
    return x_t - sigma * velocity.float().cpu(), x


def x0_errors(transformer: torch.nn.Module, sample: dict[str, torch.Tensor], seed: int,
              latent_target: str, compute_dtype: torch.dtype | None, device: torch.device,
              motion_scale: float = 1.0) -> tuple[float, float, float, float]:
    """(MSE of the x0 predicted from pure noise at sigma = 1, MSE of predicting zero) against
    the clean sample the loss trains towards, then the same two on the cells that change
    (`sample["change"]`, frames t >= 1, both halves; NaN without such cells): there the x0
    says whether the transformer predicts the reaction from its conditions. The noise is
    seeded, so only the weights move the first figures."""
    x0, x = predict_x0(transformer, sample, seed, latent_target, 1.0, compute_dtype, device,
                       motion_scale)
    regions = x0_region_errors(x0, x, sample["change"])
    error, zero, cells = (sum(regions[f"{half}/later_changed"][k] for half in X0_HALVES)
                          for k in range(3))
    changed = (error / cells, zero / cells) if cells else (float("nan"), float("nan"))
    return float((x0 - x).square().mean()), float(x.square().mean()), *changed


def x0_region_errors(x0: torch.Tensor, x: torch.Tensor, change: torch.Tensor
                     ) -> dict[str, tuple[float, float, int]]:
    """Where an x0 prediction's error lies: {"<half>/<region>": (summed squared error,
    summed squared x, i.e. predicting zero, cells)} for the halves `rgb` and `pointmap` and
    the regions `frame0`, `later_still` and `later_changed` (frames t >= 1, by the sample's
    change map `change` (1, F, h, 2w))."""
    error = (x0 - x).square().mean(dim=1)[0]  # (F, h, 2w), the mean over channels
    zero = x.square().mean(dim=1)[0]
    changed = change[0] > 0
    later = torch.zeros_like(changed)
    later[1:] = True
    width = x.shape[-1] // 2
    out = {}
    for h, half in enumerate(X0_HALVES):
        cells = slice(h * width, (h + 1) * width)
        regions = {"frame0": ~later[..., cells], "later_still": later[..., cells] & ~changed[..., cells],
                   "later_changed": later[..., cells] & changed[..., cells]}
        for region, mask in regions.items():
            out[f"{half}/{region}"] = (float(error[..., cells][mask].sum()),
                                       float(zero[..., cells][mask].sum()), int(mask.sum()))
    return out


def last_query_sigma(scheduler, num_steps: int) -> float:
    """The noise level of a sampler's last transformer query over `num_steps` steps (a fresh
    copy of `scheduler` is set, the model's own is left alone)."""
    fresh = type(scheduler).from_config(scheduler.config)
    fresh.set_timesteps(num_steps)
    return float(fresh.sigmas[num_steps - 1])


def still_motion_errors(transformer: torch.nn.Module, sample: dict[str, torch.Tensor],
                        seed: int, latent_target: str, sigma: float,
                        compute_dtype: torch.dtype | None, device: torch.device,
                        motion_scale: float = 1.0) -> tuple[float, float]:
    """A tracks model's (x0 error, predicting zero) on the pointmap half's still cells of
    frames t >= 1 at noise level `sigma` (the sampler's last query), in unscaled motion
    (divided by motion_scale squared): what still surfaces are moved by."""
    x0, x = predict_x0(transformer, sample, seed, latent_target, sigma, compute_dtype, device,
                       motion_scale)
    error, zero, cells = x0_region_errors(x0, x, sample["change"])["pointmap/later_still"]
    if not cells:
        return float("nan"), float("nan")
    return error / cells / motion_scale ** 2, zero / cells / motion_scale ** 2


def _sample(pipe: Kinema4DPipeline, episode: ProgressEpisode, seed: int) -> GenerationResult:
    """One sampling run with the model's own settings (rgb: (T, H, W, 3) uint8)."""
    robot = episode.robot
    return pipe(episode.rgb[0], robot.rgb, robot.pointmap, robot.mask, seed=seed,
                pointmap_normalization=episode.norm, tool=episode.tool,
                T_cam_from_base=episode.camera_pose)


def sample_figures(episodes: list[ProgressEpisode], samples: list[np.ndarray],
                   x0: list[tuple[float, float, float, float]],
                   still: list[tuple[float, float]] | None = None) -> dict:
    """The metrics line's figures; `sample_static_psnr_db` is None when no pixel is static;
    with `still` (a tracks model's `still_motion_errors`) the still motion's x0 error."""
    whole, static = [], []
    for episode, rgb in zip(episodes, samples, strict=True):
        error = np.square(rgb[1:].astype(np.float32) / 127.5 - 1.0
                          - episode.reconstruction[1:]).mean(axis=-1)  # (T - 1, H, W)
        whole.append(float(error.mean()))
        if episode.static[1:].any():
            static.append(float(error[episode.static[1:]].mean()))
    changed = [(e, z) for _, _, e, z in x0 if np.isfinite(e)]
    return {"x0_error_sigma1": float(np.mean([e for e, *_ in x0])),
            "x0_error_sigma1_zero": float(np.mean([z for _, z, *_ in x0])),
            "x0_error_sigma1_changed": float(np.mean([e for e, _ in changed])) if changed
            else None,
            "x0_error_sigma1_changed_zero": float(np.mean([z for _, z in changed])) if changed
            else None,
            "sample_psnr_db": psnr_of_mse(float(np.mean(whole))),
            "sample_static_psnr_db": psnr_of_mse(float(np.mean(static))) if static else None,
            **_still_figures(still)}


def _still_figures(still: list[tuple[float, float]] | None) -> dict:
    if still is None:
        return {}
    known = [pair for pair in still if np.isfinite(pair[0])]
    return {"x0_error_still_motion": float(np.mean([e for e, _ in known])) if known else None,
            "x0_error_still_motion_zero": float(np.mean([z for _, z in known])) if known else None}


def progress_picture(episodes: list[ProgressEpisode], samples: list[np.ndarray]) -> bytes:
    """PNG bytes: per episode three rows (ground truth, VAE reconstruction, sample) of
    PICTURE_FRAMES frames spread over the clip, episodes one under the other."""
    from PIL import Image

    gap = 4
    blocks = []
    for episode, rgb in zip(episodes, samples, strict=True):
        frames = np.unique(np.linspace(0, len(rgb) - 1, PICTURE_FRAMES).round().astype(int))
        recon = np.round((episode.reconstruction + 1.0) * 127.5).clip(0, 255).astype(np.uint8)
        rows = [np.concatenate(list(video[frames]), axis=1)
                for video in (episode.rgb, recon, rgb)]
        blocks.append(np.concatenate(rows, axis=0))
        blocks.append(np.full((gap, blocks[-1].shape[1], 3), 255, np.uint8))
    image = Image.fromarray(np.concatenate(blocks[:-1], axis=0))
    height = episodes[0].rgb.shape[1]
    if height > PICTURE_TILE_HEIGHT:
        scale = PICTURE_TILE_HEIGHT / height
        image = image.resize((round(image.width * scale), round(image.height * scale)),
                             Image.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()
