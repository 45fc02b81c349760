"""The from-scratch VAE stage: random crops, its two phases (short, then long windows), its
learning-rate schedule and its resumable state (a stage stopped partway, in either phase or
at their boundary, continues from its newest checkpoint to the same weights)."""

from __future__ import annotations

import pytest
import torch
from k4d.episodes import open_dataset
from k4d_model.checkpoints import build_components
from k4d_model.model.configs import get_model_config
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import VaeSection
from k4d_trainer.parallel import DistInfo
from k4d_trainer.runs import RunDir
from k4d_trainer.vae import (
    FOLDER,
    STAGE_FOLDER,
    load_saved_vae,
    random_crops,
    save_vae,
    train_vae,
    vae_phases,
)

CLIP = ClipSpec(num_frames=5, height=32, width=48)


class Stop(Exception):
    pass


def _vae():
    components, _ = build_components(get_model_config("tiny"), seed=0)
    return components.vae


def _train(dataset, section, run=None, stop_at=None):
    def log(line: str) -> None:
        if stop_at is not None and line.startswith(f"vae step {stop_at}/"):
            raise Stop(line)

    torch.manual_seed(0)
    vae = _vae()
    ids = sorted(dataset.episode_ids)
    losses = train_vae(vae, dataset, ids, CLIP, section, DistInfo(), seed=5, run=run, log=log)
    return vae, losses


def test_random_crops_cut_windows_of_the_videos():
    video = torch.arange(3 * 5 * 32 * 48, dtype=torch.float32).reshape(3, 5, 32, 48)
    g = torch.Generator().manual_seed(0)
    batch = random_crops([video], torch.tensor([0, 0, 0]), 16, g)
    assert batch.shape == (3, 3, 5, 16, 16)
    for crop in batch:  # each window is a contiguous piece of the video
        top, left = divmod(int(crop[0, 0, 0, 0]), 48)
        assert torch.equal(crop, video[..., top:top + 16, left:left + 16])
    whole = random_crops([video], torch.tensor([0]), 0, g)
    assert torch.equal(whole[0], video)
    bigger = random_crops([video], torch.tensor([0]), 64, g)  # larger than the frame
    assert torch.equal(bigger[0], video)
    short = random_crops([video], torch.tensor([0] * 4), 16, g, frames=1)
    assert short.shape == (4, 3, 1, 16, 16)
    for crop in short:
        first, rest = divmod(int(crop[0, 0, 0, 0]), 32 * 48)
        top, left = divmod(rest, 48)
        assert torch.equal(crop, video[:, first:first + 1, top:top + 16, left:left + 16])


@pytest.mark.parametrize("stop_at", [3, 5, 7])  # main phase, its boundary, long phase
def test_vae_stage_resumes_to_the_same_weights(tmp_path, make_dataset, stop_at):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    section = VaeSection(steps=4, lr=1e-3, batch_size=2, crop=16, crop_frames=1, warmup_steps=2,
                         lr_schedule="cosine", long_steps=4, long_frames=5, long_batch_size=1,
                         long_lr=5e-4, checkpoint_every=2, log_every=1)
    straight, straight_losses = _train(dataset, section)
    assert len(straight_losses) == 8

    run = RunDir(str(tmp_path / "run"))
    with pytest.raises(Stop):
        _train(dataset, section, run=run, stop_at=stop_at)  # saved at stop_at - 1
    assert run.exists(f"{STAGE_FOLDER}/latest.json")
    resumed, resumed_losses = _train(dataset, section, run=run)

    assert resumed_losses == straight_losses
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_a_saved_vae_loads_and_saves_again_to_the_same_bytes(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    assert load_saved_vae(run) is None  # nothing committed yet
    save_vae(_vae(), run)
    for attempt in ("a", "b"):  # each load reads its own temporary folder
        load_saved_vae(run).save_pretrained(str(tmp_path / attempt))
    config = (tmp_path / "a" / "config.json").read_text()
    assert config == (tmp_path / "b" / "config.json").read_text()
    assert f'"_name_or_path": "{FOLDER}"' in config
    assert ((tmp_path / "a" / "diffusion_pytorch_model.safetensors").read_bytes()
            == (tmp_path / "b" / "diffusion_pytorch_model.safetensors").read_bytes())


def test_vae_phases():
    main_only = vae_phases(VaeSection(steps=10, crop=16, crop_frames=5, batch_size=8, lr=1e-3))
    assert [(p.first, p.end, p.frames, p.batch_size) for p in main_only] == [(0, 10, 5, 8)]
    both = vae_phases(VaeSection(steps=10, crop=16, crop_frames=5, batch_size=8, lr=1e-3,
                                 long_steps=3, long_frames=13, long_batch_size=2, long_lr=5e-4))
    assert [(p.first, p.end, p.crop, p.frames, p.batch_size, p.lr) for p in both] == [
        (0, 10, 16, 5, 8, 1e-3), (10, 13, 16, 13, 2, 5e-4)]


def test_vae_section_rejects_a_crop_off_the_latent_grid():
    from k4d.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="vae.crop"):
        VaeSection(crop=20).validate()
    with pytest.raises(InvalidArgument, match="vae.lr_schedule"):
        VaeSection(lr_schedule="step").validate()
    with pytest.raises(InvalidArgument, match="vae.crop_frames"):
        VaeSection(crop_frames=4).validate()
    with pytest.raises(InvalidArgument, match="vae.long_frames"):
        VaeSection(long_frames=8).validate()


def test_kl_is_diffusers_kl_in_fp32():
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from k4d_trainer.vae import _kl

    params = torch.randn(2, 8, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    posterior = DiagonalGaussianDistribution(params)
    assert torch.allclose(_kl(posterior), posterior.kl().mean())
    low = DiagonalGaussianDistribution(params.bfloat16())
    assert _kl(low).dtype == torch.float32


def test_bf16_autocast_trains_fp32_weights_on_an_fp32_loss(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    section = VaeSection(steps=3, lr=1e-3, batch_size=2, crop=16, crop_frames=1, warmup_steps=1)
    ids = sorted(dataset.episode_ids)
    runs = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        torch.manual_seed(0)
        vae = _vae()
        losses = train_vae(vae, dataset, ids, CLIP, section, DistInfo(), seed=5, log=str,
                           compute_dtype=dtype)
        assert all(p.dtype == torch.float32 for p in vae.parameters())
        runs[name] = losses
    assert all(torch.isfinite(torch.tensor(v)).all() for v in runs.values())
    # the same batches: close, but not equal (the forward ran in bf16)
    assert runs["bf16"] != runs["fp32"]
    assert torch.allclose(torch.tensor(runs["bf16"]), torch.tensor(runs["fp32"]), rtol=0.05)
