"""The motion decoder (k4d_model.motion_decoder): an untrained one passes a tracks model's
decoded motion through, its corrections land on the first points and on the motion, it
saves and loads with the model, the pipeline draws a tracks model's frames from its output
under `motion_decoder: learned`, and the option is refused where it cannot apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d_model.checkpoints import load_model, save_k4d
from k4d_model.conditions import PointmapNormalization
from k4d_model.motion_decoder import (
    MOTION_GAIN,
    MotionDecoder,
    MotionDecoderConfig,
    decode_motion,
)
from k4d_model.options import check_model_extra
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.results import RobotCondition
from k4d_model.testing import CallableDenoiser, sliding_box_robot, tiny_per_frame_components

SMALL = MotionDecoderConfig(channels=(8, 16))


def _tracks(frames=5, height=32, width=48, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, (frames, height, width, 3)).astype(
        np.float32)


def _constant(bias: float) -> MotionDecoder:
    network = MotionDecoder(SMALL).eval()
    with torch.no_grad():
        network.head.bias.fill_(bias)
    return network


def test_an_untrained_decoder_passes_the_decoded_tracks_through():
    tracks = _tracks()
    image = np.random.default_rng(1).integers(0, 255, (32, 48, 3), dtype=np.uint8)
    np.testing.assert_allclose(decode_motion(MotionDecoder(SMALL), tracks, image), tracks,
                               atol=1e-6)


def test_its_corrections_move_the_first_points_and_each_frames_motion():
    """Frame 0's output corrects the first points (so every frame moves with them), frame t's
    its motion: a constant correction c gives frame 0 + c and frame t + 2c."""
    tracks = _tracks()
    image = np.zeros((32, 48, 3), np.uint8)
    out = decode_motion(_constant(0.5), tracks, image)
    step = 0.5 / MOTION_GAIN
    np.testing.assert_allclose(out[0], tracks[0] + step, atol=1e-6)
    np.testing.assert_allclose(out[1:], tracks[1:] + 2 * step, atol=1e-6)


def _ray_cast_robot(num_frames=5, height=32, width=48):
    image, robot = sliding_box_robot(num_frames=num_frames, height=height, width=width)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    rays = np.stack([(cols - width / 2) / 40.0, (rows - height / 2) / 40.0,
                     np.ones_like(rows)], -1)
    points = np.where(robot.mask[..., None], rays[None] * 0.8, 0.0).astype(np.float32)
    return image, RobotCondition(robot.rgb, points, robot.mask)


def _tracks_model(decoder: MotionDecoder | None, option: str = "learned"):
    components = tiny_per_frame_components("tracks")
    components.info.extra["vae_decode"] = "split"
    if option:
        components.info.extra["motion_decoder"] = option
    components.motion_decoder = decoder
    return components


def test_a_tracks_model_draws_its_frames_from_the_decoders_motion(tmp_path):
    """With `motion_decoder: learned` the pipeline carries frame 0 along the decoder's
    output: the same rollout as a model without the option given that output, and other
    frames than the decoded motion gives. The decoder saves and loads with the model."""
    image, robot = _ray_cast_robot()
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    decoder = _constant(0.3)
    components = _tracks_model(None, "")
    plain = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
    rgb, pointmap = plain.decoded_sample(image, robot, norm, seed=3, num_steps=2)
    save_k4d(_tracks_model(decoder), tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert isinstance(loaded.motion_decoder, MotionDecoder)
    assert loaded.info.extra["motion_decoder"] == "learned"
    pipe = Kinema4DPipeline(loaded, CallableDenoiser(loaded.transformer))
    drawn = pipe.finish_output(image, robot, rgb, pointmap, norm, None)
    expected = plain.finish_output(image, robot, rgb, decode_motion(decoder, pointmap, image),
                                   norm, None)
    np.testing.assert_array_equal(drawn[0], expected[0])
    np.testing.assert_allclose(drawn[1], expected[1], atol=1e-6)
    as_decoded = plain.finish_output(image, robot, rgb, pointmap, norm, None)
    assert np.abs(drawn[1] - as_decoded[1]).max() > 1e-3
    result = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2, seed=3)
    assert result.rgb.shape == (5, 32, 48, 3) and np.isfinite(result.pointmap).all()


def test_the_option_without_a_decoder_is_refused_at_load():
    with pytest.raises(FailedPrecondition, match="motion_decoder"):
        Kinema4DPipeline(_tracks_model(None), CallableDenoiser(None))


@pytest.mark.parametrize("extra, field", [
    ({"latent_target": "change", "motion_decoder": "learned"}, "extra.motion_decoder"),
    ({"motion_decoder": "learned"}, "extra.motion_decoder"),
    ({"latent_target": "tracks", "motion_decoder": "yes"}, "extra.motion_decoder"),
])
def test_the_option_is_refused_where_it_cannot_apply(extra, field):
    with pytest.raises(InvalidArgument, match=field):
        check_model_extra(extra)


def test_bad_channels_are_refused():
    with pytest.raises(InvalidArgument, match="motion_decoder.channels"):
        MotionDecoderConfig(channels=(8, 0))


def test_a_colour_decoder_reads_the_samples_rgb_half(tmp_path):
    """`colour`: the network also reads the sample's RGB half (6 more inputs); without it
    it refuses, and its config survives a save."""
    config = MotionDecoderConfig(channels=(8, 16), colour=True)
    network = MotionDecoder(config).eval()
    assert network.down[0][0].in_channels == 16
    with torch.no_grad():
        network.head.bias.fill_(0.2)
        network.down[0][0].weight.normal_()
        network.head.weight.normal_()
    tracks, image = _tracks(), np.zeros((32, 48, 3), np.uint8)
    colour = np.random.default_rng(3).uniform(-1, 1, (5, 32, 48, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="colour"):
        decode_motion(network, tracks, image)
    drawn = decode_motion(network, tracks, image, colour)
    assert np.abs(drawn - decode_motion(network, tracks, image, -colour)).max() > 1e-6
    components = _tracks_model(network)
    save_k4d(components, tmp_path / "m")
    loaded = load_model(tmp_path / "m").motion_decoder
    assert loaded.config == config
    np.testing.assert_allclose(decode_motion(loaded, tracks, image, colour), drawn, atol=1e-6)
    image_, robot = _ray_cast_robot()
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    pipe = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
    rgb, pointmap = pipe.decoded_sample(image_, robot, norm, seed=3, num_steps=2)
    np.testing.assert_allclose(pipe.redrawn_motion(image_, pointmap, rgb),
                               decode_motion(network, pointmap, image_, rgb), atol=1e-6)
