"""The from-scratch recipe's first stage: train a small video VAE (diffusers
`AutoencoderKLWan`, the generator's config for the size) on the same clips, RGB and scene
pointmap videos alike, then record its latent statistics (latents_mean / latents_std,
which the generator's pipeline uses to normalise latents).

Rank 0 writes the trained VAE to RUN_URI/vae/ with a COMMITTED marker last; a resumed run
loads it instead of training it again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.config import VaeSection
from k4d_trainer.latents import clip_normalisation, normalised_scene
from k4d_trainer.parallel import DistInfo, all_reduce_mean, barrier
from k4d_trainer.runs import RunDir

FOLDER = "vae"
COMMITTED = "COMMITTED"


def clip_videos(clip: dict[str, np.ndarray]) -> list[torch.Tensor]:
    """The two videos of an episode the VAE must reconstruct, each (3, T, H, W) in [-1, 1]:
    RGB and the scene pointmap normalised as the training samples are."""
    rgb = torch.from_numpy(clip["rgb"].astype(np.float32) / 127.5 - 1.0)
    pm = normalised_scene(clip, clip_normalisation(clip))
    return [rgb.permute(3, 0, 1, 2), torch.from_numpy(pm).permute(3, 0, 1, 2)]


def _kl(posterior) -> torch.Tensor:
    return posterior.kl().mean()


def _average_gradients(model: torch.nn.Module, info: DistInfo) -> None:
    """Data parallelism for the small VAE: replicas start identical (same seed) and
    average their gradients, as DDP would, without a wrapper around `encode`/`decode`."""
    if not info.distributed:
        return
    for param in model.parameters():
        if param.grad is not None:
            torch.distributed.all_reduce(param.grad)
            param.grad /= info.world_size


def train_vae(vae, dataset, episode_ids: list[str], clip: ClipSpec, section: VaeSection,
              info: DistInfo, seed: int, log=print) -> list[float]:
    """Train `vae` in place (data-parallel over ranks); returns the loss per step."""
    videos = [v for eid in episode_ids[info.rank::info.world_size]
              for v in clip_videos(read_clip(dataset.open(eid), clip))]
    model = vae.to(info.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=section.lr)
    generator = torch.Generator().manual_seed(seed * 31 + info.rank)
    losses = []
    for step in range(section.steps):
        picks = torch.randint(0, len(videos), (section.batch_size,), generator=generator)
        batch = torch.stack([videos[int(i)] for i in picks]).to(info.device)
        posterior = model.encode(batch).latent_dist
        recon = model.decode(posterior.sample(generator=generator)).sample
        loss = torch.nn.functional.mse_loss(recon, batch) + section.kl_weight * _kl(posterior)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        _average_gradients(model, info)
        optimizer.step()
        losses.append(all_reduce_mean(float(loss.detach()), info))
        if (step + 1) % max(1, section.steps // 5) == 0:
            log(f"vae step {step + 1}/{section.steps} loss {losses[-1]:.4f}")
    model.eval()
    _set_latent_statistics(model, videos, info)
    return losses


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
    from diffusers import AutoencoderKLWan

    with tempfile.TemporaryDirectory(prefix="k4d-vae-") as tmp:
        run.fs.get(f"{run.path}/{FOLDER}/", tmp + "/", recursive=True)
        return AutoencoderKLWan.from_pretrained(tmp, local_files_only=True).eval()


def vae_stage(components, dataset, episode_ids, clip, section: VaeSection, info: DistInfo,
              run: RunDir, seed: int, log=print) -> list[float]:
    """Load the committed VAE of this run or train one; replaces components.vae."""
    saved = load_saved_vae(run)
    if saved is not None:
        components.vae = saved
        log("vae: loaded the committed VAE of this run")
        return []
    torch.manual_seed(seed)
    losses = train_vae(components.vae, dataset, episode_ids, clip, section, info, seed, log)
    if info.is_main:
        save_vae(components.vae, run)
    barrier(info)
    components.vae = components.vae.cpu().eval()
    for p in components.vae.parameters():
        p.requires_grad_(False)
    return losses
