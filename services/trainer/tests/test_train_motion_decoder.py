"""Training the motion decoder (k4d_trainer.motion_decoder_stage): it learns a correction the
decoded tracks lack, its pairs are a tracks model's own samples beside the truth's tracks,
stored and not sampled again, and bad settings are refused."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_model.motion_decoder import MotionDecoderConfig, decode_motion
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.testing import CallableDenoiser, tiny_per_frame_components
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import DataSection
from k4d_trainer.data import open_source
from k4d_trainer.motion_decoder_stage import sample_pairs, train_motion_decoder

SMALL = MotionDecoderConfig(channels=(8, 16))


def _half_way_pairs(count=6, frames=4, height=32, width=48, seed=0):
    """A block moving right by 0.1 per frame in the truth, by half that in the 'decoded'
    tracks (the soft motion a VAE gives back); both on a still table of random points."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        table = rng.uniform(-0.5, 0.5, (height, width, 3)).astype(np.float32)
        image = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
        top, left = rng.integers(4, height - 14), rng.integers(4, width - 14)
        block = np.zeros((height, width), bool)
        block[top:top + 10, left:left + 10] = True
        image[block] = (250, 120, 20)  # the block shows in the image
        target = np.repeat(table[None], frames, 0)
        decoded = target.copy()
        for t in range(frames):
            target[t][block, 0] += 0.1 * t
            decoded[t][block, 0] += 0.05 * t
        pairs.append({"decoded": decoded.astype(np.float16), "target": target.astype(np.float16),
                      "image": image})
    return pairs


def test_a_colour_decoder_trains_on_pairs_with_the_samples_colour():
    pairs = [{**pair, "colour": np.zeros_like(pair["decoded"])} for pair in _half_way_pairs(2)]
    config = MotionDecoderConfig(channels=(8, 16), colour=True)
    network, history = train_motion_decoder(pairs, 3, config, batch_size=2, crop=16,
                                            log=lambda _: None)
    assert network.config.colour and len(history) == 3


def test_it_learns_the_motion_the_decoded_tracks_lack():
    pairs = _half_way_pairs()
    lines = []
    network, history = train_motion_decoder(pairs, 300, SMALL, batch_size=8, crop=24, lr=3e-3,
                                            log=lines.append, log_every=100)
    assert len(history) == 300 and len(lines) == 3 and "the decoded tracks as they are" in lines[0]
    late = history[-50:]
    assert np.mean([h["loss"] for h in late]) < 0.5 * np.mean([h["decoded_loss"] for h in late])
    pair = _half_way_pairs(count=1, seed=9)[0]  # a pair it never saw
    decoded, target = pair["decoded"].astype(np.float32), pair["target"].astype(np.float32)
    redrawn = decode_motion(network, decoded, pair["image"])
    moved = np.abs(target - target[:1]).max(-1) > 0.01
    assert np.abs(redrawn - target)[moved].mean() < 0.6 * np.abs(decoded - target)[moved].mean()


@pytest.mark.parametrize("settings, message", [
    ({"steps": 0}, "steps"), ({"crop": 64}, "crop"), ({"pairs": []}, "no pairs"),
    ({"config": MotionDecoderConfig(channels=(8, 16), colour=True)}, "colour")])
def test_bad_settings_are_refused(settings, message):
    arguments = {"pairs": _half_way_pairs(count=1), "steps": 1, "config": SMALL, "crop": 16}
    arguments.update(settings)
    with pytest.raises(ValueError, match=message):
        train_motion_decoder(**arguments)


def test_pairs_are_the_models_samples_beside_the_truth_and_stored(tmp_path, make_dataset):
    """Each pair holds the tracks model's decoded sample (the pipeline's own), the truth's
    tracks normalised as the generator normalises (from the robot's points) and frame 0; a
    second call reads the stored pairs and samples nothing."""
    data = make_dataset(tmp_path / "data", count=2, objects=True, frames=5, height=32, width=48)
    components = tiny_per_frame_components("tracks")
    components.info.extra["vae_decode"] = "split"
    denoiser = CallableDenoiser(components.transformer)
    pipe = Kinema4DPipeline(components, denoiser)
    source = open_source(DataSection(uri=data), None)
    ids = list(source.episode_ids)
    clip = ClipSpec(5, 32, 48)
    pairs = sample_pairs(pipe, source, ids, clip, tmp_path / "pairs", seed=11, log=lambda _: None)
    assert len(pairs) == 2 and denoiser.calls > 0
    first = pairs[0]
    assert first["decoded"].shape == first["target"].shape == (5, 32, 48, 3)
    assert first["image"].shape == (32, 48, 3) and first["image"].dtype == np.uint8
    assert first["colour"].shape == (5, 32, 48, 3)  # the sample's RGB half, for `colour`
    moved = np.abs(first["target"].astype(np.float32) - first["target"][:1]).max(-1) > 0.005
    assert 0 < moved[1:].mean() < 0.5  # the pushed block moves, the rest stands still
    calls = denoiser.calls
    again = sample_pairs(pipe, source, ids, clip, tmp_path / "pairs", seed=11, log=lambda _: None)
    assert denoiser.calls == calls
    for one, other in zip(pairs, again, strict=True):
        for key in one:
            np.testing.assert_array_equal(one[key], other[key])
    assert sorted(p.name for p in (tmp_path / "pairs").iterdir()) == [f"{e}.npz" for e in ids]
