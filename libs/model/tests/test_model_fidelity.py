"""Fidelity options (k4d_model.fidelity): the given frame comes back, unchanged pixels keep the
input exactly, the robot's points come from kinematics; models without the options sample as
before."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.camera import Camera
from k4d.errors import InvalidArgument
from k4d_model.fidelity import (
    MIN_CALIBRATION_PIXELS,
    MIN_SHADING_PIXELS,
    anchor_first_latent,
    calibrated_robot_render,
    change_mask,
    compose_over_input,
    compose_relative,
    fill_behind_robot,
    fill_points_behind_robot,
    input_frames,
    ridge_fit,
    shaded_robot_render,
    surface_normals,
    uncovered_by_robot,
)
from k4d_model.options import FidelityOptions
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.testing import CallableDenoiser as Denoiser
from k4d_model.testing import sliding_box_robot as _robot

ALL_ON = {"first_frame": "given", "latent_anchor": True, "decode": "relative",
          "change_threshold": 12.0, "change_depth_m": 0.02, "change_dilate": 1,
          "robot_pointmap": "kinematics"}


def _pipe(make_tiny, extra):
    components = make_tiny("act")[0]
    components.info.extra = dict(extra)
    return Kinema4DPipeline(components, backend=Denoiser(components.transformer))


def test_options_read_from_extra_and_default_to_off():
    off = FidelityOptions.from_extra({})
    assert not off.relative and not off.latent_anchor and off.first_frame == ""
    on = FidelityOptions.from_extra(ALL_ON)
    assert on.relative and on.latent_anchor and on.change_threshold == 12.0
    assert on.to_dict()["robot_pointmap"] == "kinematics"


def test_compose_relative_keeps_the_input_outside_the_mask():
    first = np.full((4, 5, 3), 100.0, np.float32)
    generated = np.full((3, 4, 5, 3), 60.0, np.float32)
    reference = np.full((3, 4, 5, 3), 50.0, np.float32)
    mask = np.zeros((3, 4, 5), bool)
    mask[1, 2, 3] = True
    out = compose_relative(first, generated, reference, mask)
    assert out[1, 2, 3, 0] == 110.0  # input + (generated - reference)
    assert np.all(out[~mask] == 100.0)
    assert np.all(compose_relative(first, generated, reference, None) == 110.0)


def test_change_mask_covers_change_robot_and_grows():
    T, H, W = 3, 10, 10
    delta = np.zeros((T, H, W, 3), np.float32)
    delta[2, 5, 5, 1] = 40.0   # a changed pixel
    delta[2, 0, 0, 0] = 5.0    # below the threshold: noise
    robot = np.zeros((T, H, W), bool)
    robot[0, 8, 8] = True      # the robot was here in frame 0: uncovered later
    opts = FidelityOptions.from_extra(ALL_ON)
    mask = change_mask(delta, None, robot, opts)
    assert not mask[0].any()              # frame 0 is the observation
    assert mask[2, 5, 5] and mask[2, 4, 6]  # grown by one pixel
    assert not mask[2, 0, 0]
    assert mask[1, 8, 8] and mask[2, 8, 8]
    depth = np.zeros((T, H, W), np.float32)
    depth[1, 2, 2] = 0.05
    assert change_mask(delta, depth, robot, opts)[1, 2, 2]


def test_anchor_noises_the_clean_latent_to_sigma():
    latents = torch.zeros(1, 2, 3, 2, 4)
    clean, noise = torch.ones(1, 2, 1, 2, 2), torch.full((1, 2, 1, 2, 2), 3.0)
    out = anchor_first_latent(latents, clean, noise, 0.25)
    assert torch.allclose(out[:, :, 0, :, :2], torch.full((1, 2, 2, 2), 0.75 + 0.75))
    assert torch.all(out[:, :, 1:] == 0) and torch.all(out[:, :, :, :, 2:] == 0)


def test_given_frame_comes_back_and_unchanged_pixels_are_the_input(make_tiny):
    image, robot = _robot()
    initial = np.full((32, 48, 3), 0.0, np.float32)
    initial[..., 2] = 1.5
    pipe = _pipe(make_tiny, {**ALL_ON, "change_threshold": 250.0, "change_depth_m": 100.0})
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2,
               initial_pointmap=initial)
    assert np.array_equal(out.rgb[0], image)
    assert np.array_equal(out.pointmap[0], initial)
    # With thresholds nothing reaches, only the robot's pixels (now or in frame 0) change.
    grown = 0 < change_mask(np.zeros((*robot.mask.shape, 3), np.float32), None, robot.mask,
                        FidelityOptions.from_extra(ALL_ON))
    assert np.all(out.rgb[~grown] == np.broadcast_to(image, out.rgb.shape)[~grown])
    later = robot.mask.copy()
    later[0] = False  # frame 0 is the observation, robot included
    assert np.array_equal(out.pointmap[later], robot.pointmap[later])
    assert out.metadata["fidelity"]["decode"] == "relative"
    assert out.metadata["initial_pointmap"] is True


def test_without_options_the_output_is_the_decoders(make_tiny):
    """A model with no output options returns the decoded transformer frames untouched, even
    when the rollout comes with a tool track (a gripper closing) and the camera's pose: no
    option, no rule, moves anything."""
    from k4d.tool import ToolTrack
    from k4d_model.conditions import PointmapNormalization

    image, robot = _robot()
    plain = _pipe(make_tiny, {})
    decoded = {}
    original = plain.decode_float

    def remember(latents):
        decoded["rgb"], decoded["pointmap"] = original(latents)
        return decoded["rgb"], decoded["pointmap"]

    plain.decode_float = remember
    frames = robot.mask.shape[0]
    poses = np.repeat(np.eye(4)[None], frames, axis=0)
    poses[:, :3, 3] = [0.0, 0.0, 0.8]  # the tool in front of the camera, over the box
    tool = ToolTrack(poses, np.linspace(0.08, 0.0, frames))  # closing
    out = plain(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2, seed=1,
                T_cam_from_base=np.eye(4), tool=tool)
    expected_rgb = np.round((decoded["rgb"] / 2.0 + 0.5) * 255.0).astype(np.uint8)
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    np.testing.assert_array_equal(out.rgb, expected_rgb)
    np.testing.assert_array_equal(out.pointmap, norm.denormalise(decoded["pointmap"]))
    assert not np.array_equal(out.rgb[0], image)  # frame 0 is the decoder's, not the input
    assert out.metadata["fidelity"]["decode"] == "" and "contacts" not in out.metadata


def test_bad_initial_pointmap_is_invalid_argument(make_tiny):
    image, robot = _robot()
    pipe = _pipe(make_tiny, ALL_ON)
    with pytest.raises(InvalidArgument) as exc:
        pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1,
             initial_pointmap=np.zeros((5, 5, 3), np.float32))
    assert exc.value.violations[0].field == "initial_pointmap"
    bad = np.zeros((32, 48, 3), np.float32)
    bad[0, 0, 0] = np.nan
    with pytest.raises(InvalidArgument):
        pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1, initial_pointmap=bad)


def test_change_mask_and_composite_over_input():
    T, H, W = 3, 20, 20
    delta = np.zeros((T, H, W, 3), np.float32)
    delta[2, 3, 3] = 90.0     # a change the decoder shows
    delta[2, 15, 15] = 20.0   # below the threshold: decoder noise
    robot = np.zeros((T, H, W), bool)
    robot[1, 8:10, 5:7] = True
    opts = FidelityOptions.from_extra({"decode": "composite", "change_threshold": 40,
                                       "change_dilate": 0})
    mask = change_mask(delta, None, robot, opts)
    assert mask[2, 3, 3] and not mask[2, 15, 15] and mask[1, 8, 5] and not mask[0].any()
    first = np.zeros((H, W, 3), np.float32)
    generated = np.full((T, H, W, 3), 7.0, np.float32)
    out = compose_over_input(first, generated, mask)
    assert out[2, 3, 3, 0] == 7.0 and out[2, 15, 15, 0] == 0.0


def test_composite_options_are_checked():
    assert FidelityOptions.check({"decode": "composite", "change_threshold": 4}).against_input
    with pytest.raises(InvalidArgument):
        FidelityOptions.check({"change_threshold": -1})
    with pytest.raises(InvalidArgument, match="change_near_robot_px"):
        FidelityOptions.check({"change_near_robot_px": 4})  # a rule of where the world moves


def test_input_frames_are_the_input_with_the_robot_condition_over_it():
    image, robot = _robot(num_frames=3)
    first = np.full((32, 48, 3), 2.0, np.float32)
    rgb, points = input_frames(image, first, robot)
    assert rgb.shape == robot.rgb.shape and rgb.dtype == np.uint8
    assert np.array_equal(rgb[robot.mask], robot.rgb[robot.mask])
    assert np.array_equal(rgb[~robot.mask], np.broadcast_to(image, rgb.shape)[~robot.mask])
    assert np.array_equal(points[robot.mask], robot.pointmap[robot.mask])
    assert np.all(points[~robot.mask] == 2.0)


def test_input_decode_does_not_sample_when_frame_0_points_are_known(make_tiny):
    image, robot = _robot()
    initial = np.zeros((32, 48, 3), np.float32)
    initial[..., 2] = 1.5
    pipe = _pipe(make_tiny, {"first_frame": "given", "decode": "input"})
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2,
               initial_pointmap=initial)
    assert pipe.backend.calls == 0  # the transformer's frames are not shown: not sampled
    assert out.metadata["num_steps"] == 0 and out.metadata["guidance"]["passes"] == 0
    later = robot.mask.copy()
    later[0] = False  # frame 0 is the observation, robot included
    assert np.array_equal(out.rgb[0], image) and np.array_equal(out.pointmap[0], initial)
    assert np.array_equal(out.rgb[later], robot.rgb[later])
    assert np.array_equal(out.pointmap[later], robot.pointmap[later])
    static = ~robot.mask
    assert np.array_equal(out.rgb[static], np.broadcast_to(image, out.rgb.shape)[static])
    assert np.all(out.pointmap[static][:, 2] == 1.5)


def test_input_decode_samples_for_frame_0_points_it_does_not_know(make_tiny):
    image, robot = _robot()
    holes = np.zeros((32, 48, 3), np.float32)
    holes[:16, :, 2] = 1.5  # the lower half unmeasured
    for initial in (None, holes):
        pipe = _pipe(make_tiny, {"decode": "input"})
        out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2, seed=3,
                   initial_pointmap=initial)
        assert pipe.backend.calls == 2 and out.metadata["num_steps"] == 2
        # the colours are still the input's; only frame 0's unknown points are generated
        static = ~robot.mask
        assert np.array_equal(out.rgb[static], np.broadcast_to(image, out.rgb.shape)[static])
        both = static[1] & static[2]
        assert np.array_equal(out.pointmap[1][both], out.pointmap[2][both])
    assert np.all(out.pointmap[:, :16][static[:, :16]][:, 2] == 1.5)


def test_input_decode_is_a_checked_choice():
    assert FidelityOptions.check({"decode": "input"}).input_only
    assert not FidelityOptions.check({"decode": "composite"}).input_only
    with pytest.raises(InvalidArgument) as exc:
        FidelityOptions.check({"decode": "inputs"})
    assert exc.value.violations[0].field == "extra.decode"


def test_change_ramp_fades_the_generated_change_in_above_the_threshold():
    T, H, W = 2, 1, 4
    delta = np.zeros((T, H, W, 3), np.float32)
    delta[1, 0, :, 0] = [40.0, 50.0, 60.0, 90.0]
    opts = FidelityOptions.check({"decode": "composite", "change_threshold": 40,
                                  "change_ramp": 20, "change_dilate": 0})
    weight = change_mask(delta, None, np.zeros((T, H, W), bool), opts)
    assert weight[1, 0].tolist() == [0.0, 0.5, 1.0, 1.0] and not weight[0].any()
    first = np.full((H, W, 3), 100.0, np.float32)
    generated = np.full((T, H, W, 3), 200.0, np.float32)
    out = compose_over_input(first, generated, weight)
    assert out[1, 0, :, 0].tolist() == [100.0, 150.0, 200.0, 200.0]


def test_calibrated_robot_render_takes_the_colours_of_the_given_robot():
    T, H, W = 3, 24, 24  # 400 robot pixels in frame 0, as many as a held-out episode shows
    rng = np.random.default_rng(0)
    render = rng.integers(0, 256, (T, H, W, 3)).astype(np.uint8)
    mask = np.zeros((T, H, W), bool)
    mask[:, 2:22, 2:22] = True
    # the scene's lights: darker and warmer than the projection stage's shading, per channel
    x = render.astype(np.float64) / 255.0
    seen = np.round(np.clip(255.0 * np.stack([0.2 + 0.5 * x[..., 0] ** 2, 0.6 * x[..., 1],
                                              0.1 + 0.3 * x[..., 2]], -1), 0, 255))
    image = np.where(mask[0, ..., None], seen[0], 0).astype(np.uint8)
    painted = calibrated_robot_render(render, image, mask)
    error = np.abs(painted[1:][mask[1:]].astype(int) - seen[1:][mask[1:]])
    raw = np.abs(render[1:][mask[1:]].astype(int) - seen[1:][mask[1:]])
    # the ridge (ROBOT_FIT_RIDGE) costs a few levels of an exact fit's accuracy
    assert error.mean() <= 3.5 and error.max() <= 16 and raw.mean() > 40
    few = np.zeros_like(mask)
    few[0, 0, :MIN_CALIBRATION_PIXELS - 1] = True
    assert calibrated_robot_render(render, image, few) is None  # too few pixels to fit


def test_robot_colour_fit_does_not_extrapolate_one_links_colours_to_black_or_white():
    """Frame 0 shows a link of one narrow grey range, noisy as an image is; later poses show
    the render's whole range. An unpenalised quadratic runs off to black and white there;
    the ridge (ROBOT_FIT_RIDGE) stays near the darkening that frame 0 shows."""
    T, H, W = 2, 20, 20
    rng = np.random.default_rng(1)
    render = np.empty((T, H, W, 3), np.uint8)
    render[0] = rng.integers(170, 191, (H, W, 1)).repeat(3, -1)
    render[1] = rng.integers(40, 251, (H, W, 1)).repeat(3, -1)
    mask = np.ones((T, H, W), bool)
    truth = 0.6 * render.astype(float)
    image = np.clip(np.round(truth[0] + rng.normal(0, 3, (H, W, 3))), 0, 255).astype(np.uint8)
    error = np.abs(calibrated_robot_render(render, image, mask)[1] - truth[1])

    def features(frame: np.ndarray) -> np.ndarray:  # the colour fit's: 1, r, g, b, squares
        x = frame.reshape(-1, 3) / 255.0
        return np.concatenate([np.ones((len(x), 1)), x, x * x], axis=1)

    coef = ridge_fit(features(render[0]), image.reshape(-1, 3), strength=0.0)
    unpenalised = np.abs(np.clip(features(render[1]) @ coef, 0, 255).reshape(H, W, 3) - truth[1])
    assert unpenalised.max() > 150 and error.max() < 64


def _planes(slopes: list[tuple[float, float]], size: int = 10) -> np.ndarray:
    """(size, size * len(slopes), 3): side-by-side planar patches z = 1 + a x + b y."""
    v, u = np.mgrid[0:size, 0:size] * 0.01
    return np.concatenate([np.stack([u, v, 1.0 + a * u + b * v], -1) for a, b in slopes], 1)


def test_surface_normals_face_the_camera_and_ignore_points_off_the_mask():
    points = np.zeros((12, 12, 3))
    points[1:11, 1:11] = _planes([(0.5, 0.0)])
    mask = np.zeros((12, 12), bool)
    mask[1:11, 1:11] = True
    normals = surface_normals(points, mask)
    expected = np.array([0.5, 0.0, -1.0]) / np.hypot(0.5, 1.0)
    np.testing.assert_allclose(normals[mask], np.broadcast_to(expected, (100, 3)), atol=1e-9)
    assert not normals[~mask].any()


def test_shaded_robot_render_carries_the_scenes_shading_to_new_poses():
    """A rounded link lit by the scene's light in frame 0, two planar faces at new tilts in
    frame 1. The render (the projection stage's) is one flat grey, so only the normals can
    tell the shading; the colour fit alone cannot."""
    light = np.array([0.3, -0.4, -0.87])

    def seen(points):
        n = surface_normals(points, np.ones(points.shape[:2], bool))
        return 255.0 * (0.5 + 0.3 * n @ light)

    v, u = np.mgrid[0:20, 0:20] * 0.01
    dome = np.stack([u, v, 1.2 - np.sqrt(0.2 ** 2 - (u - 0.095) ** 2 - (v - 0.095) ** 2)], -1)
    points = np.stack([dome, _planes([(0.6, 0.0), (-0.4, 0.3)], size=20)[:, :20]])
    points[1, :, 10:] = _planes([(-0.4, 0.3)], size=20)[:, :10]
    mask = np.ones(points.shape[:3], bool)
    render = np.full(points.shape, 180, np.uint8)
    image = np.round(seen(points[0])).astype(np.uint8)[..., None].repeat(3, -1)
    shaded = shaded_robot_render(render, points, image, mask)
    truth = seen(points[1])[..., None]
    inner = np.zeros((20, 20), bool)  # off the seam between the two faces
    inner[:, 1:9] = inner[:, 12:19] = True
    assert np.abs(shaded[1][inner].astype(float) - truth[inner]).max() <= 2.0
    flat = calibrated_robot_render(render, image, mask)
    assert np.abs(flat[1][inner].astype(float) - truth[inner]).max() > 15.0
    few = np.zeros_like(mask)  # too few pixels for the shading fit: the colour fit alone
    few[:, :3] = True
    assert MIN_CALIBRATION_PIXELS <= few[0].sum() < MIN_SHADING_PIXELS
    colour_only = calibrated_robot_render(render, image, few)
    assert colour_only is not None
    assert np.array_equal(shaded_robot_render(render, points, image, few), colour_only)


def test_calibrated_robot_rgb_paints_the_robot_after_frame_zero(make_tiny):
    pipe = _pipe(make_tiny, {**ALL_ON, "robot_rgb": "calibrated"})
    info = pipe.info
    image, robot = _robot(info.num_frames, info.height, info.width)
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2)
    painted = calibrated_robot_render(robot.rgb, image, robot.mask)
    assert painted is not None
    later = robot.mask.copy()
    later[0] = False
    assert np.array_equal(out.rgb[later], painted[later])
    assert np.array_equal(out.rgb[0], image)
    assert out.metadata["fidelity"]["robot_rgb"] == "calibrated"


def test_shaded_robot_rgb_paints_the_robot_after_frame_zero(make_tiny):
    pipe = _pipe(make_tiny, {**ALL_ON, "robot_rgb": "shaded"})
    info = pipe.info
    image, robot = _robot(info.num_frames, info.height, info.width)
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2)
    painted = shaded_robot_render(robot.rgb, robot.pointmap, image, robot.mask)
    later = robot.mask.copy()
    later[0] = False
    assert later.any() and np.array_equal(out.rgb[later], painted[later])
    assert np.array_equal(out.rgb[0], image)
    assert out.metadata["fidelity"]["robot_rgb"] == "shaded"


@pytest.mark.parametrize("extra", [{"robot_rgb": "painted"}, {"change_ramp": -1},
                                   {"uncovered": "inpainted"}, {"uncovered_pointmap": "yes"}])
def test_new_output_options_are_checked(extra):
    with pytest.raises(InvalidArgument):
        FidelityOptions.check(extra)


def test_fill_behind_robot_continues_the_surroundings():
    H, W = 24, 32
    u = np.arange(W, dtype=np.float32)
    ramp = np.repeat(np.stack([40 + 4 * u, np.full(W, 90.0), 200 - 2 * u], -1)[None], H, 0)
    robot = np.zeros((H, W), bool)
    robot[6:18, 10:20] = True
    image = np.where(robot[..., None], 255.0, ramp).astype(np.uint8)  # the robot, painted over
    filled = fill_behind_robot(image, robot)
    assert np.array_equal(filled[~robot], image[~robot].astype(np.float32))  # only behind it
    # a linear background comes back nearly linear (Laplace's equation), far from the robot's 255
    assert np.abs(filled[robot] - ramp[robot]).max() < 6.0
    flat = fill_behind_robot(np.full((H, W, 3), 70, np.uint8), robot)
    assert np.allclose(flat, 70.0)


def test_uncovered_is_what_of_frame_zero_robot_it_has_left():
    T, H, W = 3, 10, 12
    robot = np.zeros((T, H, W), bool)
    robot[0, 3:6, 2:5] = True
    robot[1, 3:6, 3:6] = True   # moved one pixel right
    robot[2, 3:6, 8:11] = True  # gone from where it was
    uncovered = uncovered_by_robot(robot)
    assert not uncovered[0].any()
    assert uncovered[1].sum() == 3 and uncovered[1, 3:6, 2].all()
    assert np.array_equal(uncovered[2], robot[0])


def test_uncovered_filled_replaces_the_models_guess_behind_the_robot(make_tiny):
    pipe = _pipe(make_tiny, {**ALL_ON, "uncovered": "filled"})
    info = pipe.info
    image, robot = _robot(info.num_frames, info.height, info.width)
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2)
    uncovered = uncovered_by_robot(robot.mask)
    assert uncovered.any()
    filled = np.round(np.clip(fill_behind_robot(image, robot.mask[0]), 0, 255)).astype(np.uint8)
    assert np.array_equal(out.rgb[uncovered], np.broadcast_to(filled, out.rgb.shape)[uncovered])
    assert out.metadata["fidelity"]["uncovered"] == "filled"


def _tilted_plane(camera: Camera) -> np.ndarray:
    """(H, W, 3) points of the plane 0.3 x + 0.2 y + z = 1.2 (camera frame) seen by `camera`."""
    rays = camera.ray_directions()
    depth = 1.2 / (0.3 * rays[..., 0] + 0.2 * rays[..., 1] + 1.0)
    return (rays * depth[..., None]).astype(np.float32)


def test_fill_points_behind_robot_continues_a_plane_behind_it():
    camera = Camera(width=48, height=32, fx=40.0, fy=40.0, cx=23.5, cy=15.5)
    plane = _tilted_plane(camera)
    robot = np.zeros((32, 48), bool)
    robot[8:24, 16:30] = True
    robot_points = np.where(robot[..., None], plane * 0.6, 0.0).astype(np.float32)  # in front
    first = np.where(robot[..., None], robot_points, plane)  # frame 0 shows the robot there
    behind = fill_points_behind_robot(first, robot_points, robot)
    assert not behind[~robot].any()
    error = np.abs(behind[robot][:, 2] - plane[robot][:, 2]) / plane[robot][:, 2]
    assert error.max() < 0.01, error.max()  # the plane, not the robot 40 % nearer
    rays = behind[robot] / behind[robot][:, 2:]
    assert np.allclose(rays, plane[robot] / plane[robot][:, 2:], atol=1e-6)  # on their rays


def test_uncovered_pointmap_filled_shows_the_scene_behind_the_robot(make_tiny):
    extra = {**ALL_ON, "uncovered": "filled", "uncovered_pointmap": "filled"}
    pipe = _pipe(make_tiny, extra)
    info = pipe.info
    image, robot = _robot(info.num_frames, info.height, info.width)
    scene = np.zeros((info.height, info.width, 3), np.float32)
    scene[..., 2] = 2.0  # a wall 2 m away, the robot in front of it
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=2,
               initial_pointmap=np.where(robot.mask[0][..., None], robot.pointmap[0], scene))
    uncovered = uncovered_by_robot(robot.mask)
    assert uncovered.any()
    assert np.allclose(out.pointmap[..., 2][uncovered], 2.0, atol=1e-4)
    plain = _pipe(make_tiny, {**ALL_ON, "uncovered": "filled"})(
        image, robot.rgb, robot.pointmap, robot.mask, num_steps=2,
        initial_pointmap=np.where(robot.mask[0][..., None], robot.pointmap[0], scene))
    assert not np.allclose(plain.pointmap[..., 2][uncovered], 2.0)  # the robot's ghost
    assert out.metadata["fidelity"]["uncovered_pointmap"] == "filled"
