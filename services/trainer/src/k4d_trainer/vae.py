"""The from-scratch recipe's first stage: train a small video VAE (diffusers
`AutoencoderKLWan`, the generator's config for the size) on the same clips, RGB and scene
pointmap videos alike, then record its latent statistics (latents_mean / latents_std,
which the generator's pipeline uses to normalise latents).

Rank 0 writes the trained VAE to RUN_URI/vae/ with a COMMITTED marker last; a resumed run
loads it instead of training it again.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from k4d_model.frame_vae import load_vae

from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.config import VaeSection
from k4d_trainer.latents import clip_normalisation, normalised_scene
from k4d_trainer.parallel import DistInfo, autocast, barrier
from k4d_trainer.runs import RunDir
from k4d_trainer.schedule import lr_lambda
from k4d_trainer.stage_state import load_stage_state, save_stage_state, side_step

FOLDER = "vae"
STATS_VIDEOS_PER_RANK = 64
COMMITTED = "COMMITTED"


def clip_videos(clip: dict[str, np.ndarray]) -> list[torch.Tensor]:
    """The two videos of an episode the VAE must reconstruct, each (3, T, H, W) in [-1, 1]:
    RGB and the scene pointmap normalised as the training samples are."""
    rgb = torch.from_numpy(clip["rgb"].astype(np.float32) / 127.5 - 1.0)
    pm = normalised_scene(clip, clip_normalisation(clip))
    return [rgb.permute(3, 0, 1, 2), torch.from_numpy(pm).permute(3, 0, 1, 2)]


def _kl(posterior) -> torch.Tensor:
    # diffusers' DiagonalGaussianDistribution.kl, in fp32 also under bf16 autocast
    mean, logvar = posterior.mean.float(), posterior.logvar.float()
    return (0.5 * torch.sum(mean.pow(2) + logvar.exp() - 1.0 - logvar, dim=[1, 2, 3])).mean()


def random_crops(videos: list[torch.Tensor], picks: torch.Tensor, crop: int,
                 generator: torch.Generator, frames: int = 0) -> torch.Tensor:
    """The picked videos as a batch, each cut to a random `crop` x `crop` window of
    `frames` consecutive frames (whole frames / the whole clip when 0 or larger)."""
    out = []
    for i in picks:
        video = videos[int(i)]
        length, height, width = video.shape[-3:]
        ch, cw = (min(crop, height), min(crop, width)) if crop else (height, width)
        ct = min(frames, length) if frames else length
        first = int(torch.randint(0, length - ct + 1, (1,), generator=generator))
        top = int(torch.randint(0, height - ch + 1, (1,), generator=generator))
        left = int(torch.randint(0, width - cw + 1, (1,), generator=generator))
        out.append(video[..., first:first + ct, top:top + ch, left:left + cw])
    return torch.stack(out)


def psnr_of_mse(mse: float) -> float:
    """PSNR (dB) of a mean squared error on [-1, 1] data: the same as on 0-255 pixels."""
    return 10.0 * math.log10(4.0 / max(mse, 1e-12))


@dataclass
class VaePhase:
    """One stretch of the stage: steps [first, end) on random windows of one shape, with
    its own AdamW and learning-rate schedule."""

    first: int
    end: int
    crop: int
    frames: int
    batch_size: int
    lr: float


def vae_phases(section: VaeSection) -> list[VaePhase]:
    """The main phase, then (with `long_steps`) the long-window phase: the causal VAE runs
    a clip as a first frame and 4-frame chunks, each chunk reading the cached features of
    the previous one; windows of 5 frames never exercise the steady state (a chunk after a
    4-frame chunk), so a model trained only on them decodes longer clips badly."""
    phases = [VaePhase(0, section.steps, section.crop, section.crop_frames,
                       section.batch_size, section.lr)]
    if section.long_steps:
        phases.append(VaePhase(section.steps, section.steps + section.long_steps, section.crop,
                               section.long_frames, section.long_batch_size or section.batch_size,
                               section.long_lr or section.lr))
    return phases


def train_vae(vae, dataset, episode_ids: list[str], clip: ClipSpec, section: VaeSection,
              info: DistInfo, seed: int, run: RunDir | None = None, log=print,
              compute_dtype: torch.dtype | None = None) -> list[float]:
    """Train `vae` in place (data-parallel over ranks); returns the loss per step. With a
    run and `section.checkpoint_every`, the stage saves its state every so many steps and
    continues from the newest one when started again. compute_dtype: the autocast dtype of
    the forward pass (None: fp32; the loss is fp32 either way)."""
    videos = [v for eid in episode_ids[info.rank::info.world_size]
              for v in clip_videos(read_clip(dataset.open(eid), clip))]
    model = vae.to(info.device).train()
    generator = torch.Generator().manual_seed(seed * 31 + info.rank)
    phases = vae_phases(section)
    total = phases[-1].end
    saved = None
    if run is not None and section.checkpoint_every:
        saved = load_stage_state(run, STAGE_FOLDER, model, generator, info, log,
                                 "vae stage")
    start = saved["step"] if saved else 0
    losses: list[float] = list(saved["losses"]) if saved else []
    log_every = section.log_every or max(1, total // 5)
    for index, phase in enumerate(phases):
        if start >= phase.end:
            continue
        optimizer = torch.optim.AdamW(model.parameters(), lr=phase.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(section.warmup_steps, phase.end - phase.first,
                                 section.lr_schedule))
        if saved and saved.get("phase", 0) == index and saved["step"] > phase.first:
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
        recent: list[float] = []
        for step in range(max(start, phase.first), phase.end):
            picks = torch.randint(0, len(videos), (phase.batch_size,), generator=generator)
            batch = random_crops(videos, picks, phase.crop, generator,
                                 phase.frames).to(info.device)
            with autocast(compute_dtype, info.device):
                posterior = model.encode(batch).latent_dist
                recon = model.decode(posterior.sample(generator=generator)).sample
            mse = torch.nn.functional.mse_loss(recon.float(), batch)
            loss = mse + section.kl_weight * _kl(posterior)
            losses.append(side_step(loss, model, optimizer, scheduler, info))
            recent.append(float(mse.detach()))
            done = step + 1
            if done % log_every == 0 or done == phase.end:
                mean_mse = sum(recent) / len(recent)
                log(f"vae step {done}/{total} loss {losses[-1]:.4f} reconstruction PSNR "
                    f"{psnr_of_mse(mean_mse):.2f} dB (last {len(recent)} steps, windows of "
                    f"{phase.frames or 'all'} frames) lr {scheduler.get_last_lr()[0]:.2e}")
                recent = []
            if (run is not None and section.checkpoint_every and done < total
                    and done % section.checkpoint_every == 0):
                save_stage_state(run, STAGE_FOLDER, done, {"phase": index, "losses": losses},
                                 model, optimizer, scheduler, generator, info)
    model.eval()
    # Statistics of a spread sample: a full pass over a large set costs as much as hundreds
    # of training steps on a CPU, and 64 videos per rank pin the per-channel moments well.
    stride = max(1, len(videos) // STATS_VIDEOS_PER_RANK)
    _set_latent_statistics(model, videos[::stride][:STATS_VIDEOS_PER_RANK], info)
    return losses


# RUN/vae_stage/: the stage's resumable state (k4d_trainer.stage_state).
STAGE_FOLDER = "vae_stage"


@torch.no_grad()
def _set_latent_statistics(vae, videos: list[torch.Tensor], info: DistInfo) -> None:
    """latents_mean / latents_std per channel over the data (all ranks)."""
    sums = None
    for video in videos:
        latent = vae.encode(video[None].to(info.device)).latent_dist.mode().float()
        flat = latent.transpose(0, 1).reshape(latent.shape[1], -1)
        part = torch.stack([flat.sum(1), (flat ** 2).sum(1),
                            torch.full_like(flat[:, 0], flat.shape[1])])
        sums = part if sums is None else sums + part
    if info.distributed:
        torch.distributed.all_reduce(sums)
    mean = sums[0] / sums[2]
    std = (sums[1] / sums[2] - mean ** 2).clamp_min(1e-6).sqrt()
    vae.register_to_config(latents_mean=mean.cpu().tolist(), latents_std=std.cpu().tolist())


def save_vae(vae, run: RunDir) -> None:
    """Rank 0: RUN_URI/vae/ (diffusers layout) with the COMMITTED marker last."""
    with tempfile.TemporaryDirectory(prefix="k4d-vae-") as tmp:
        vae.save_pretrained(tmp)
        for path in sorted(Path(tmp).rglob("*")):
            if path.is_file():
                run.put_file(str(path), f"{FOLDER}/{path.relative_to(tmp).as_posix()}")
    run.write_bytes(f"{FOLDER}/{COMMITTED}", b"{}")


def load_saved_vae(run: RunDir):
    """The committed VAE of an earlier attempt of this run, or None."""
    if not run.exists(f"{FOLDER}/{COMMITTED}"):
        return None
    with tempfile.TemporaryDirectory(prefix="k4d-vae-") as tmp:
        run.fs.get(f"{run.path}/{FOLDER}/", tmp + "/", recursive=True)
        vae = load_vae(tmp, local_files_only=True)
    # from_pretrained records the temporary folder it read as _name_or_path, which a model
    # exported from this VAE would then carry: the run's folder name instead, so the same
    # run exports the same bytes every time (make demo-model's shipped files).
    vae.register_to_config(_name_or_path=FOLDER)
    return vae


@torch.no_grad()
def reconstruction_figures(vae, dataset, episode_ids: list[str], clip: ClipSpec,
                           device: str | torch.device = "cpu") -> dict:
    """How well `vae` reconstructs the clips of `episode_ids` (held-out episodes): PSNR in dB
    of the pooled squared error of the decoded latent mode, per video (RGB on 0-255 pixels,
    the scene pointmap as the samples normalise it), over every frame and over frame 0
    alone, and the worst clip's."""
    vae = vae.to(device).eval()
    sums = {"rgb": [0.0, 0.0, 0], "pointmap": [0.0, 0.0, 0]}  # all frames, frame 0, clips
    worst = {"rgb": math.inf, "pointmap": math.inf}
    for eid in episode_ids:
        for name, video in zip(("rgb", "pointmap"), clip_videos(read_clip(dataset.open(eid), clip)),
                               strict=True):
            x = video[None].to(device)
            recon = vae.decode(vae.encode(x).latent_dist.mode()).sample.float().clamp(-1.0, 1.0)
            per_frame = (recon - x).square().mean(dim=(0, 1, 3, 4))  # (T,)
            sums[name][0] += float(per_frame.mean())
            sums[name][1] += float(per_frame[0])
            sums[name][2] += 1
            worst[name] = min(worst[name], psnr_of_mse(float(per_frame.mean())))
    figures = {"episodes": len(episode_ids)}
    for name, (all_frames, first, count) in sums.items():
        figures[f"{name}_psnr"] = round(psnr_of_mse(all_frames / count), 2)
        figures[f"{name}_frame0_psnr"] = round(psnr_of_mse(first / count), 2)
        figures[f"{name}_worst_clip_psnr"] = round(worst[name], 2)
    return figures


def write_heldout_reconstruction(vae, section: VaeSection, clip: ClipSpec, run: RunDir, log=print) -> dict | None:
    """Rank 0: `reconstruction_figures` on `section.heldout_uri`, written to
    RUN/vae/heldout.json and logged; None without a held-out dataset."""
    if not section.heldout_uri:
        return None
    import json

    from k4d.episodes import open_dataset

    dataset = open_dataset(section.heldout_uri)
    figures = reconstruction_figures(vae, dataset, dataset.episode_ids, clip)
    figures["uri"] = section.heldout_uri
    run.write_bytes(f"{FOLDER}/heldout.json", json.dumps(figures, indent=2).encode())
    log(f"vae held-out reconstruction ({figures['episodes']} clips): RGB {figures['rgb_psnr']} dB "
        f"(frame 0 {figures['rgb_frame0_psnr']}), pointmap {figures['pointmap_psnr']} dB "
        f"(frame 0 {figures['pointmap_frame0_psnr']})")
    return figures


def vae_stage(components, dataset, episode_ids, clip, section: VaeSection, info: DistInfo,
              run: RunDir, seed: int, log=print, compute_dtype: torch.dtype | None = None
              ) -> list[float]:
    """Load the committed VAE of this run or train one; replaces components.vae."""
    saved = load_saved_vae(run)
    if saved is not None:
        components.vae = saved
        log("vae: loaded the committed VAE of this run")
        if info.is_main and not run.exists(f"{FOLDER}/heldout.json"):
            write_heldout_reconstruction(saved, section, clip, run, log)
        barrier(info)
        return []
    torch.manual_seed(seed)
    losses = train_vae(components.vae, dataset, episode_ids, clip, section, info, seed, run,
                       log, compute_dtype)
    if info.is_main:
        save_vae(components.vae, run)
        run.remove(STAGE_FOLDER)  # the committed VAE supersedes the partial state
        write_heldout_reconstruction(components.vae.cpu(), section, clip, run, log)
    barrier(info)
    components.vae = components.vae.cpu().eval()
    for p in components.vae.parameters():
        p.requires_grad_(False)
    return losses
