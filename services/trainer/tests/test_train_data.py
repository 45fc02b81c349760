"""Clip adaptation, the deterministic sampler and the objective's draws (pure, fast)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.errors import InvalidArgument
from k4d_trainer.clips import ClipSpec, adapt_clip, check_adaptable, frame_indices, resize_crop
from k4d_trainer.data import EpisodeSampler
from k4d_trainer.objective import learns_change, noise_batch, soften_mask, training_schedule


def test_frame_indices_keep_ends_and_spread_evenly():
    assert frame_indices(49, 13).tolist() == list(range(0, 49, 4))
    assert frame_indices(9, 5).tolist() == [0, 2, 4, 6, 8]
    assert frame_indices(5, 5).tolist() == [0, 1, 2, 3, 4]


def test_resize_crop_covers_then_crops_the_centre():
    clip = ClipSpec(1, 4, 6)
    video = np.zeros((1, 8, 16), np.float32)
    video[0, :, 5:11] = 1.0  # the centre 6 columns of the 16
    out = resize_crop(video, clip, "nearest")  # scale 0.5 -> 4x8, crop columns 1..6
    assert out.shape == (1, 4, 6)
    assert out[0, 0].tolist() == [0, 0, 1, 1, 1, 0]
    rgb = np.full((2, 40, 56, 3), 200, np.uint8)
    assert resize_crop(rgb, ClipSpec(2, 32, 48), "bilinear").dtype == np.uint8


def test_adapt_clip_keeps_the_robot_render_black_off_the_mask():
    mask = np.zeros((1, 10, 10), bool)
    mask[0, 3:7, 3:7] = True
    robot_rgb = np.where(mask[..., None], 255, 0).astype(np.uint8)
    arrays = {"rgb": robot_rgb, "robot_rgb": robot_rgb, "robot_mask": mask,
              "pointmap": np.ones((1, 10, 10, 3), np.float32),
              "robot_pointmap": np.ones((1, 10, 10, 3), np.float32)}
    out = adapt_clip(arrays, ClipSpec(1, 16, 16))
    assert out["robot_mask"].dtype == bool and out["robot_mask"].shape == (1, 16, 16)
    assert (out["robot_rgb"][~out["robot_mask"]] == 0).all()


def test_check_adaptable_names_the_problem():
    clip = ClipSpec(5, 32, 48)
    arrays = ["rgb", "pointmap", "robot_rgb", "robot_pointmap", "robot_mask"]
    check_adaptable("e", 9, 40, 56, clip, 2.0, arrays)
    with pytest.raises(InvalidArgument, match="lacks \\['pointmap'\\]"):
        check_adaptable("e", 9, 40, 56, clip, 2.0, [a for a in arrays if a != "pointmap"])
    with pytest.raises(InvalidArgument, match="3.20x"):
        check_adaptable("e", 9, 10, 16, clip, 2.0, arrays)


def _stream(sampler: EpisodeSampler, steps: int) -> list:
    return [sampler.next_batch() for _ in range(steps)]


def test_sampler_is_deterministic_sharded_and_resumable():
    ids = [f"e{i}" for i in range(5)]
    single = _stream(EpisodeSampler(ids, 7, 4, 0, 1), 6)
    assert single == _stream(EpisodeSampler(ids, 7, 4, 0, 1), 6)
    assert single != _stream(EpisodeSampler(ids, 8, 4, 0, 1), 6)
    ranks = [_stream(EpisodeSampler(ids, 7, 4, r, 2), 6) for r in range(2)]
    for step in range(6):  # the ranks' slices make up the single-process global batch
        assert ranks[0][step] + ranks[1][step] == single[step]
    for epoch_batch in (single[:5],):  # every epoch visits each episode once
        flat = [eid for batch in epoch_batch for _, eid in batch][:5]
        assert sorted(flat) == ids

    first = EpisodeSampler(ids, 7, 4, 0, 1)
    _stream(first, 3)
    state = first.state_dict()
    elastic = EpisodeSampler(ids, 7, 4, 1, 2)  # resumed on another world size
    elastic.load_state_dict(state)
    assert _stream(elastic, 3) == [b[2:] for b in single[3:]]
    with pytest.raises(InvalidArgument, match="global_batch_size"):
        EpisodeSampler(ids, 7, 3, 0, 2)


def test_noise_depends_only_on_the_sample_number():
    schedule = training_schedule()
    batch = {"latents": torch.randn(2, 16, 2, 4, 12), "condition": torch.randn(2, 20, 2, 4, 12),
             "arm_cond": torch.ones(2, 20, 2, 4, 12)}
    both = noise_batch(batch, [10, 11], 3, schedule, 0.1, 4)
    one = noise_batch({k: v[1:] for k, v in batch.items()}, [11], 3, schedule, 0.1, 4)
    torch.testing.assert_close(both.model_input[1:], one.model_input)
    torch.testing.assert_close(both.target[1:], one.target)
    assert both.model_input.shape == (2, 36, 2, 4, 12)
    s = 1 - both.timestep / 1000  # shift 1: sigma = t / 1000
    assert ((both.timestep >= 1) & (both.timestep <= 1000)).all() and s.shape == (2,)


def test_change_target_of_a_static_clip_is_the_noise():
    """latent_target change: a clip whose RGB latents never leave frame 0's has a zero clean
    sample on the RGB half, so the target there is the noise itself; the pointmap half
    keeps the official target (eps - x)."""
    schedule = training_schedule(3.0)
    first = torch.randn(1, 16, 1, 4, 6)
    latents = torch.cat([first.expand(-1, -1, 3, -1, -1), torch.randn(1, 16, 3, 4, 6)], dim=-1)
    batch = {"latents": latents, "condition": torch.randn(1, 17, 3, 4, 12),
             "arm_cond": torch.ones(1, 17, 3, 4, 12)}
    absolute = noise_batch(batch, [5], 3, schedule, 0.0, 1)
    change = noise_batch(batch, [5], 3, schedule, 0.0, 1, latent_target="change")
    eps = change.target + torch.cat([torch.zeros_like(first.expand(-1, -1, 3, -1, -1)),
                                     latents[..., 6:]], dim=-1)
    torch.testing.assert_close(change.target[..., 6:], absolute.target[..., 6:])
    torch.testing.assert_close(eps, absolute.target + latents)  # the same noise drawn
    assert change.model_input.shape == (1, 33, 3, 4, 12)


def test_the_tracks_target_learns_the_motion_of_still_surfaces_as_zero():
    """latent_target tracks: the RGB half learns its change as `change` does; the pointmap
    half keeps frame 0 and learns the later frames' change from it, so a surface that never
    moves (equal latents in every frame) has a zero clean sample there and its target is the
    noise itself, while frame 0's target is the official one."""
    assert learns_change("change") and learns_change("tracks") and not learns_change("absolute")
    schedule = training_schedule(3.0)
    first_rgb, first_points = torch.randn(1, 16, 1, 4, 6), torch.randn(1, 16, 1, 4, 6)
    latents = torch.cat([first_rgb.expand(-1, -1, 3, -1, -1),
                         first_points.expand(-1, -1, 3, -1, -1)], dim=-1).clone()
    batch = {"latents": latents, "condition": torch.randn(1, 17, 3, 4, 12),
             "arm_cond": torch.ones(1, 17, 3, 4, 12)}
    absolute = noise_batch(batch, [5], 3, schedule, 0.0, 1)
    tracks = noise_batch(batch, [5], 3, schedule, 0.0, 1, latent_target="tracks")
    change = noise_batch(batch, [5], 3, schedule, 0.0, 1, latent_target="change")
    eps = absolute.target + latents  # the noise drawn for every target alike
    torch.testing.assert_close(tracks.target[..., :6], change.target[..., :6])
    torch.testing.assert_close(tracks.target[:, :, 1:, :, 6:], eps[:, :, 1:, :, 6:])
    torch.testing.assert_close(tracks.target[:, :, :1, :, 6:], absolute.target[:, :, :1, :, 6:])


def test_soft_mask_sets_about_ten_percent_of_the_ones_to_half():
    arm = torch.zeros(20, 4, 30, 30)
    arm[:4, :, :, :15] = 1.0
    soft = soften_mask(arm, 0.1, 4, torch.Generator().manual_seed(0))
    ones = (arm[0] == 1).sum().item()
    halves = (soft[0] == 0.5).sum().item()
    assert 0.07 * ones < halves < 0.13 * ones
    assert ((soft[0] == 0.5) == (soft[3] == 0.5)).all()  # one map tiled over the channels
    assert (soft[0][arm[0] == 0] == 0).all() and torch.equal(soft[4:], arm[4:])


def test_robo4d_layout_is_a_source(tmp_path):
    """Our Robo4D export (metric metadata beside the 8-bit videos) and the official form
    (videos only: pointmaps used as stored, already in [-1, 1])."""
    import shutil

    from k4d.episodes.robo4d import write_sample
    from k4d_trainer.clips import read_clip
    from k4d_trainer.config import DataSection
    from k4d_trainer.data import open_source, select_episodes
    from k4d_trainer.synthetic import synthetic_episode

    root = tmp_path / "robo4d"
    for i in range(2):
        meta, a = synthetic_episode(i, frames=9, height=48, width=64)
        write_sample(root, meta.episode_id, rgb=a["rgb"], robot_rgb=a["robot_rgb"],
                     robot_mask=a["robot_mask"], robot_pointmap=a["robot_pointmap"], fps=10.0,
                     pointmap=a["pointmap"])
    clip = ClipSpec(5, 32, 48)
    source = open_source(DataSection(uri=str(root)))
    assert select_episodes(source, DataSection(uri=str(root)), clip) == ["ep000", "ep001"]
    ours = read_clip(source.open("ep001"), clip)
    assert ours["rgb"].shape == (5, 32, 48, 3) and not bool(ours["normalised"])
    assert ours["pointmap"][..., 2].mean() > 0.5  # metres again (the plane is ~1 m away)

    for folder in ("pointmap", "mask_pointmap"):
        for meta_file in (root / folder).glob("*.json"):
            meta_file.unlink()  # what the official release ships: no metric metadata
    shutil.rmtree(root / "first_frames")
    official = read_clip(open_source(DataSection(uri=str(root), format="robo4d")).open("ep000"),
                         clip)
    assert bool(official["normalised"])
    assert official["pointmap"].min() >= -1.0 and official["pointmap"].max() <= 1.0


def test_read_clip_reads_only_the_arrays_asked_for(tmp_path, make_dataset):
    """`names`: a caller that needs a few arrays (the tool position's normalisation) reads
    those, each as the full read has it, and not the videos."""
    from k4d.episodes import open_dataset
    from k4d_trainer.clips import read_clip

    dataset = open_dataset(make_dataset(tmp_path / "ds", count=1, frames=5, height=32, width=48))
    episode = dataset.open(sorted(dataset.episode_ids)[0])
    clip = ClipSpec(num_frames=5, height=32, width=48)
    full = read_clip(episode, clip)
    few = read_clip(episode, clip, names=("robot_pointmap", "robot_mask"))
    assert set(few) == {"robot_pointmap", "robot_mask", "normalised"}
    for name in ("robot_pointmap", "robot_mask"):
        np.testing.assert_array_equal(few[name], full[name])


def test_bf16_encoding_has_its_own_fingerprint_and_fp32_latents(tmp_path, make_dataset):
    from k4d.episodes import open_dataset
    from k4d_model.checkpoints import build_components
    from k4d_model.model.configs import get_model_config
    from k4d_trainer.clips import read_clip
    from k4d_trainer.latents import SampleEncoder

    components, _ = build_components(get_model_config("tiny"), seed=0)
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=1, frames=5, height=32, width=48))
    clip = read_clip(dataset.open(sorted(dataset.episode_ids)[0]),
                     ClipSpec(num_frames=5, height=32, width=48))
    fp32 = SampleEncoder(components)
    bf16 = SampleEncoder(components, compute_dtype=torch.bfloat16)
    assert bf16.fingerprint != fp32.fingerprint  # a cache of one is not read as the other's
    full, low = fp32.encode(clip), bf16.encode(clip)
    assert all(v.dtype == torch.float32 for v in low.values())
    assert not torch.equal(low["latents"], full["latents"])
    assert torch.allclose(low["latents"], full["latents"], atol=0.1)


def test_a_tracks_encoder_encodes_the_tracks_on_the_pointmap_half(tmp_path, make_dataset):
    """latent_target tracks: its own cache fingerprint; the RGB half and the rest of the sample
    are the plain encoder's, the pointmap half encodes the clip's tracks; a clip without
    tracks is refused, and so is reading them from an episode without object ids."""
    from k4d.episodes import open_dataset
    from k4d_model.checkpoints import build_components
    from k4d_model.model.configs import get_model_config
    from k4d_trainer.latents import SampleEncoder, sample_clip

    components, _ = build_components(get_model_config("tiny"), seed=0)
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=1, frames=5, height=32, width=48))
    episode = dataset.open(sorted(dataset.episode_ids)[0])
    clip = sample_clip(episode, ClipSpec(num_frames=5, height=32, width=48))
    plain, tracks = SampleEncoder(components), SampleEncoder(components, tracks=True)
    assert tracks.fingerprint != plain.fingerprint
    still = tracks.encode({**clip, "tracks": clip["pointmap"]})
    base = plain.encode(clip)
    assert all(torch.equal(still[k], base[k]) for k in base)
    moved = clip["pointmap"].copy()
    moved[1:] += np.float32(0.05)  # every surface moved 5 cm by frame 1
    sample = tracks.encode({**clip, "tracks": moved})
    half = sample["latents"].shape[-1] // 2
    assert torch.equal(sample["latents"][..., :half], base["latents"][..., :half])
    assert not torch.equal(sample["latents"][:, 1:, :, half:], base["latents"][:, 1:, :, half:])
    with pytest.raises(ValueError, match="tracks"):
        tracks.encode(clip)
    with pytest.raises(InvalidArgument, match=r"training\.latent_target"):
        sample_clip(episode, ClipSpec(num_frames=5, height=32, width=48), tracks=True)


def test_only_bf16_by_name_puts_the_stages_before_the_transformer_in_bf16():
    from k4d_trainer.parallel import stage_dtype

    assert stage_dtype("bf16") is torch.bfloat16
    assert stage_dtype("auto") is None and stage_dtype("fp32") is None


@pytest.mark.parametrize("native", [True, False])
def test_bf16_if_native_picks_bf16_only_where_the_cpu_runs_it_natively(monkeypatch, native):
    """On a CPU without AVX512-BF16 or AMX, bf16 autocast is emulated and many times slower
    than fp32 (docs/benchmarks.md): `bf16-if-native` then trains in fp32."""
    from k4d_trainer import parallel

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    cpu = torch.device("cpu")
    expected = torch.bfloat16 if native else None
    assert parallel.native_bf16(cpu) is native
    assert parallel.stage_dtype("bf16-if-native", cpu) is expected
    assert parallel.autocast_dtype("bf16-if-native", cpu) is expected
    assert parallel.autocast_dtype("bf16-if-native", torch.device("cuda")) is torch.bfloat16
    # the other values do not depend on the CPU
    assert parallel.stage_dtype("bf16", cpu) is torch.bfloat16
    assert parallel.autocast_dtype("auto", cpu) is None


def test_the_cpus_own_answer_agrees_with_its_flags():
    """native_bf16 asks torch (CPUID); where Linux lists AVX512-BF16 or AMX in /proc/cpuinfo,
    torch sees it too. Only this way round: a kernel may hide a flag CPUID has."""
    from pathlib import Path

    from k4d_trainer.parallel import native_bf16

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo on this platform")
    flags = set(cpuinfo.read_text().split())
    if {"avx512_bf16", "amx_tile"} & flags:
        assert native_bf16(torch.device("cpu"))


def test_a_run_says_which_precision_bf16_if_native_chose(tmp_path, recipe, make_dataset,
                                                         tiny_official, monkeypatch, caplog):
    import logging

    from k4d_trainer.config import load_config_file
    from k4d_trainer.trainer import Trainer

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    path = recipe(tmp_path, make_dataset(tmp_path / "data", count=2), str(tiny_official),
                  model={"precision": "bf16-if-native"}, training={"steps": 1})
    with caplog.at_level(logging.INFO, logger="k4d.trainer"):
        trainer = Trainer.build(load_config_file(path), str(tmp_path / "run"))
        trainer.close()
    assert "precision bf16-if-native on cpu: stages fp32, transformer fp32" in caplog.text
    assert trainer.compute_dtype is None
