"""The per-frame VAE (k4d_model.frame_vae) and the change-from-frame-0 latent target
(k4d_model.latent_target): shapes and strides, frames encoded independently, saving and
loading by class name, and a tiny per-frame model sampled end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d_model.checkpoints import load_model, save_k4d
from k4d_model.conditions import PointmapNormalization
from k4d_model.frame_vae import (
    FrameAutoencoder,
    load_vae,
    spatial_stride,
    temporal_stride,
    vae_strides,
)
from k4d_model.latent_target import add_first, change_from_first, repeat_first_frame
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.results import RobotCondition
from k4d_model.testing import CallableDenoiser, sliding_box_robot, tiny_per_frame_components


def _vae() -> FrameAutoencoder:
    torch.manual_seed(0)
    return FrameAutoencoder(z_dim=4, channels=(8, 16), num_res_blocks=1).eval()


def test_shapes_and_strides():
    vae = _vae()
    video = torch.randn(2, 3, 5, 32, 48)
    posterior = vae.encode(video).latent_dist
    assert posterior.mode().shape == (2, 4, 5, 16, 24)
    assert vae.decode(posterior.mode()).sample.shape == video.shape
    assert (temporal_stride(vae), spatial_stride(vae)) == (1, 2)
    assert vae_strides({"temperal_downsample": [False, True, True], "dim_mult": [1, 2, 4, 4]}) == (4, 8)


@torch.no_grad()
def test_each_frame_is_encoded_on_its_own():
    """A frame's latent does not depend on the other frames: a static clip has frame 0's
    latent in every frame, which is what the change target relies on."""
    vae = _vae()
    video = torch.randn(1, 3, 4, 32, 48)
    alone = vae.encode(video[:, :, 2:3]).latent_dist.mode()
    together = vae.encode(video).latent_dist.mode()[:, :, 2:3]
    torch.testing.assert_close(alone, together, rtol=1e-5, atol=1e-5)
    static = vae.encode(video[:, :, :1].expand(-1, -1, 4, -1, -1)).latent_dist.mode()
    torch.testing.assert_close(static, static[:, :, :1].expand_as(static))


def test_save_and_load_by_class_name(tmp_path):
    vae = _vae()
    vae.register_to_config(latents_mean=[0.1, 0.2, 0.3, 0.4], latents_std=[1.0, 2.0, 3.0, 4.0])
    vae.save_pretrained(tmp_path / "vae")
    loaded = load_vae(tmp_path / "vae")
    assert isinstance(loaded, FrameAutoencoder) and loaded.config.latents_std == [1.0, 2.0, 3.0, 4.0]
    for a, b in zip(vae.state_dict().values(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_change_target_round_trip_and_first_frame_repeat():
    latents = torch.randn(2, 4, 5, 3, 8)
    first = latents[:, :, :1, :, :4]
    change = change_from_first(latents, first)
    assert change[:, :, 0, :, :4].abs().max() == 0  # frame 0 changes nothing
    torch.testing.assert_close(change[..., 4:], latents[..., 4:])  # pointmap half absolute
    torch.testing.assert_close(add_first(change, first), latents)
    tracks = change_from_first(latents, first, tracks=True)  # the points' motion from frame 0
    torch.testing.assert_close(tracks[..., :4], change[..., :4])
    torch.testing.assert_close(tracks[:, :, 1:, :, 4:], latents[:, :, 1:, :, 4:] - latents[:, :, :1, :, 4:])
    torch.testing.assert_close(add_first(tracks, first, tracks=True), latents)
    scaled = change_from_first(latents, first, tracks=True, motion_scale=8.0)  # motion only
    torch.testing.assert_close(scaled[..., :4], change[..., :4])
    torch.testing.assert_close(scaled[:, :, :1, :, 4:], latents[:, :, :1, :, 4:])
    torch.testing.assert_close(scaled[:, :, 1:, :, 4:], 8.0 * tracks[:, :, 1:, :, 4:])
    torch.testing.assert_close(add_first(scaled, first, tracks=True, motion_scale=8.0), latents)
    clean = torch.randn(2, 4, 1, 3, 4)
    repeated = repeat_first_frame(latents, clean)
    torch.testing.assert_close(repeated[..., :4], clean.expand(-1, -1, 5, -1, -1))
    torch.testing.assert_close(repeated[..., 4:], latents[:, :, :1, :, 4:].expand(-1, -1, 5, -1, -1))


def _tiny_per_frame(change: bool | str):
    return tiny_per_frame_components(change if isinstance(change, str) else
                                     "change" if change else None)


def test_a_per_frame_model_samples_and_reloads(tmp_path):
    components = _tiny_per_frame(change=True)
    assert components.transformer.config.in_channels == 33
    save_k4d(components, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert isinstance(loaded.vae, FrameAutoencoder)
    assert loaded.info.extra["latent_target"] == "change"
    image, robot = sliding_box_robot(num_frames=5, height=32, width=48)
    pipe = Kinema4DPipeline(loaded, CallableDenoiser(loaded.transformer))
    result = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2)
    assert result.rgb.shape == (5, 32, 48, 3) and np.isfinite(result.pointmap).all()
    assert result.metadata["latent_target"] == "change" and result.metadata["ablation"] is None


@torch.no_grad()
def test_first_frame_ablation_decodes_frame_0_in_every_frame():
    """ablation="first-frame" asks the model to change nothing: every decoded RGB frame is
    the VAE's frame 0 (no output option composites anything here)."""
    components = _tiny_per_frame(change=True)
    image, robot = sliding_box_robot(num_frames=5, height=32, width=48)
    pipe = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
    result = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2, ablation="first-frame")
    assert result.metadata["ablation"] == "first-frame"
    for t in range(1, 5):
        np.testing.assert_array_equal(result.rgb[t], result.rgb[0])
    with pytest.raises(Exception, match="ablation"):
        pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1, ablation="zeros")


def _ray_cast_robot(num_frames=5, height=32, width=48):
    """The sliding box of `sliding_box_robot`, its points on the rays of a pinhole (as the
    projection stage ray-casts them): a `tracks` model fits its camera to them."""
    image, robot = sliding_box_robot(num_frames=num_frames, height=height, width=width)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    rays = np.stack([(cols - width / 2) / 40.0, (rows - height / 2) / 40.0,
                     np.ones_like(rows)], -1)
    points = np.where(robot.mask[..., None], rays[None] * 0.8, 0.0).astype(np.float32)
    return image, robot.rgb, points, robot.mask


def test_a_tracks_model_draws_its_frames_from_frame_0s_pixels():
    """latent_target tracks: frames t >= 1 are frame 0 carried along the sampled motion. The
    first-frame ablation samples no motion, so every pixel off frame 0's robot is frame 0's
    exactly. The sample itself (a random tiny model's motion) gives whole, finite frames."""
    components = _tiny_per_frame(change="tracks")
    image, rgb, points, mask = _ray_cast_robot()
    pipe = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
    still = pipe(image, rgb, points, mask, num_steps=2, ablation="first-frame")
    assert still.metadata["latent_target"] == "tracks"
    for t in range(1, 5):
        np.testing.assert_array_equal(still.rgb[t][~mask[0]], image[~mask[0]])
    result = pipe(image, rgb, points, mask, num_steps=2)
    assert result.rgb.shape == (5, 32, 48, 3) and np.isfinite(result.pointmap).all()


def test_a_tracks_models_motion_scale_divides_the_sampled_motion():
    """`motion_scale`: the transformer samples the motion that many times larger, and the
    pipeline scales it back. The same random tiny model at a huge scale moves next to nothing:
    its frames t >= 1 keep frame 0's pixels off the robot where at scale 1 they do not. (The
    halves decode apart, as the demo model's do, so the RGB half's sample moves no point.)"""
    image, rgb, points, mask = _ray_cast_robot()
    moved = {}
    for scale in (1.0, 1e6):
        components = _tiny_per_frame(change="tracks")
        components.info.extra["vae_decode"] = "split"
        if scale != 1.0:
            components.info.extra["motion_scale"] = scale
        pipe = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
        result = pipe(image, rgb, points, mask, num_steps=2, seed=3)
        off_robot = ~mask[0]
        moved[scale] = np.mean([(result.rgb[t][off_robot] != image[off_robot]).any(-1).mean()
                                for t in range(1, 5)])
    assert moved[1.0] > 0.05 and moved[1e6] < 0.01, moved


def test_a_tracks_model_carries_frame_0_along_its_mean_motion_sample():
    """`motion_samples` K: the rollout draws K samples, seeded as a generation seeds them,
    and draws frame 0 carried along their mean: the output is the rendering of the K
    decoded samples' mean, and not one sample's."""
    image, rgb, points, mask = _ray_cast_robot()
    components = _tiny_per_frame(change="tracks")
    components.info.extra.update(vae_decode="split", motion_samples=3)
    pipe = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
    result = pipe(image, rgb, points, mask, num_steps=2, seed=3)
    assert result.metadata["samples"] == 3
    robot = RobotCondition(rgb, points, mask)
    norm = PointmapNormalization.from_points(points, mask)
    drawn_rgb, drawn_points = pipe.decoded_sample(image, robot, norm, seed=3, num_steps=2, count=3)
    mean = pipe.finish_output(image, robot, drawn_rgb.mean(0), drawn_points.mean(0), norm, None)
    np.testing.assert_array_equal(result.rgb, mean[0])
    np.testing.assert_allclose(result.pointmap, mean[1], atol=1e-5)
    first = pipe.finish_output(image, robot, drawn_rgb[0], drawn_points[0], norm, None)
    assert (first[0] != result.rgb).any()  # not one sample's frames


def test_a_tracks_models_sample_refiner_reads_its_carried_frames():
    """`cascade` on a tracks model: the refiner reads its frames (frame 0 carried along the
    sampled motion, `refiner_input`) against frame 0 itself (`sample_reference`). A refiner
    that passes its sample through (residual, nothing learned) gives the tracks model's
    frames back and `colour` keeps the carried points; one that draws a constant change
    gives frame 0 plus it."""
    from k4d_model.cascade import POINT_GAIN, CascadeConfig, SampleRefiner

    image, rgb, points, mask = _ray_cast_robot()

    def pipe_with(cascade, option: str = "") -> Kinema4DPipeline:
        components = _tiny_per_frame(change="tracks")
        components.info.extra.update(vae_decode="split", decode="relative")
        if option:
            components.info.extra["cascade"] = option
        components.cascade = cascade
        return Kinema4DPipeline(components, CallableDenoiser(components.transformer))

    plain_pipe = pipe_with(None)
    plain = plain_pipe(image, rgb, points, mask, num_steps=2, seed=3)
    robot = RobotCondition(rgb, points, mask)
    norm = PointmapNormalization.from_points(points, mask)
    frames, frame_points = plain_pipe.refiner_input(
        image, robot, *plain_pipe.decoded_sample(image, robot, norm, seed=3, num_steps=2), norm)
    assert frames.shape == frame_points.shape == (5, 32, 48, 3)
    np.testing.assert_allclose((frames + 1.0) * 127.5, plain.rgb, atol=1e-3)
    np.testing.assert_allclose(plain_pipe.sample_reference(image)[3], image / 127.5 - 1.0,
                               atol=1e-6)

    passing = SampleRefiner(CascadeConfig(channels=(8, 16), residual=True)).eval()
    through = pipe_with(passing, "colour")(image, rgb, points, mask, num_steps=2, seed=3)
    assert np.abs(through.rgb.astype(int) - plain.rgb.astype(int)).max() <= 1
    np.testing.assert_array_equal(through.pointmap, plain.pointmap)

    constant = SampleRefiner(CascadeConfig(channels=(8, 16))).eval()
    with torch.no_grad():
        constant.head.bias.copy_(torch.tensor([10 / 127.5] * 3 + [0.5] * 3))
    drawn = pipe_with(constant, "colour")(image, rgb, points, mask, num_steps=2, seed=3)
    expected = np.clip(image.astype(int) + 10, 0, 255)
    for t in range(1, 5):
        off_robot = ~mask[t]
        assert np.abs(drawn.rgb[t][off_robot].astype(int) - expected[off_robot]).max() <= 1
    np.testing.assert_array_equal(drawn.pointmap, plain.pointmap)  # `colour`: carried points
    # `sample`: the refiner's points too, frame 0's plus its constant change
    moved = pipe_with(constant, "sample")(image, rgb, points, mask, num_steps=2, seed=3)
    np.testing.assert_array_equal(moved.rgb, drawn.rgb)
    np.testing.assert_allclose(moved.pointmap[1:] - moved.pointmap[:1],
                               0.5 * norm.scale / POINT_GAIN, atol=1e-5)
