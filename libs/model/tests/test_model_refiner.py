"""The change refiner (k4d_model.refiner): its inputs, its network, its place in the model
directory, the `refiner` output option that shows its predicted change, and the depth head
that `refiner_pointmap` moves the points by."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.camera import Camera
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d_model.checkpoints import load_k4d, save_k4d
from k4d_model.fidelity import move_refined_points, show_refined_change
from k4d_model.options import FidelityOptions
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.refiner import (
    CAMERA_CHANNELS,
    DEPTH_GAIN,
    INPUT_CHANNELS,
    OUTPUT_CHANNELS,
    PLANE_CHANNELS,
    BaseRays,
    ChangeRefiner,
    RefinerConfig,
    depth_on_planes,
    depth_scale,
    load_refiner,
    predict_change,
    refiner_inputs,
    save_refiner,
    with_colour,
    with_geometry,
    with_objects,
)
from k4d_model.results import RobotCondition
from k4d_model.testing import CallableDenoiser as Denoiser
from k4d_model.testing import sliding_box_robot

SMALL = RefinerConfig(channels=(8, 16, 16))
CAMERA = Camera(width=48, height=32, fx=40.0, fy=40.0, cx=23.5, cy=15.5)


def _constant_refiner(levels: float, logit: float, depth: float | None = None,
                      first: float | None = None) -> ChangeRefiner:
    """A refiner whose every pixel changes by `levels` with probability sigmoid(logit) (and
    by `depth` in the depth head's unit, with a depth head; frame 0's depth exp(`first`) x
    the robot's scale, with a first-depth head)."""
    config = RefinerConfig(channels=SMALL.channels, depth=depth is not None,
                           first_depth=first is not None)
    refiner = ChangeRefiner(config).eval()
    with torch.no_grad():
        refiner.head.weight.zero_()
        extra = [v for v in (depth, first) if v is not None]
        refiner.head.bias.copy_(torch.tensor([levels / 127.5] * 3 + [logit] + extra))
    return refiner


def _assert_same_weights(a: ChangeRefiner, b: ChangeRefiner) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def _ray_cast_robot():
    """sliding_box_robot with its points ray-cast through CAMERA at 0.8 m."""
    image, robot = sliding_box_robot()
    depth = np.where(robot.mask, 0.8, 0.0)
    points = np.stack([CAMERA.points_from_depth(d) for d in depth])
    return image, RobotCondition(robot.rgb, points, robot.mask)


def test_inputs_describe_the_image_and_the_robot_in_each_frame():
    image, robot = sliding_box_robot()
    x = refiner_inputs(image, robot).numpy()
    assert x.shape == (4, INPUT_CHANNELS, 32, 48) and x.dtype == np.float32
    first = image.transpose(2, 0, 1) / 127.5 - 1.0
    assert np.abs(x[:, :3] - first[None]).max() < 1e-6, np.abs(x[:, :3] - first[None]).max()
    t = 2
    assert np.array_equal(x[t - 1, 6] > 0, robot.mask[t])               # the robot now
    assert np.array_equal(x[t - 1, 7] > 0, robot.mask[0])               # in frame 0
    assert np.array_equal(x[t - 1, 8] > 0, robot.mask[:t + 1].any(0))   # where it has been
    assert np.array_equal(x[t - 1, 9] > 0, robot.mask[t - 1])           # the frame before
    depth = np.where(robot.mask[t], robot.pointmap[t, ..., 2], 0)
    scale = robot.pointmap[0, ..., 2][robot.mask[0]].mean()
    assert np.allclose(x[t - 1, 10], depth / scale, atol=1e-6)
    assert np.allclose(x[:, 12, 0, 0], [0.25, 0.5, 0.75, 1.0])
    assert refiner_inputs(image, robot, [3]).shape == (1, INPUT_CHANNELS, 32, 48)


@pytest.mark.parametrize("size", [(32, 48), (30, 45)])
def test_refiner_keeps_the_frame_size(size):
    out = ChangeRefiner(SMALL)(torch.zeros(2, INPUT_CHANNELS, *size))
    assert out.shape == (2, OUTPUT_CHANNELS, *size)


def test_refiner_config_is_checked():
    with pytest.raises(InvalidArgument, match="refiner.channels"):
        RefinerConfig(channels=(8, 12))


def test_save_and_load_are_exact(tmp_path):
    torch.manual_seed(0)
    refiner = ChangeRefiner(SMALL)
    save_refiner(refiner, tmp_path)
    loaded = load_refiner(tmp_path)
    assert loaded.config == SMALL
    _assert_same_weights(refiner, loaded)
    assert load_refiner(tmp_path / "none") is None
    deep = ChangeRefiner(RefinerConfig(channels=(8, 16), depth=True))
    save_refiner(deep, tmp_path / "deep")
    assert load_refiner(tmp_path / "deep").config.depth


def test_predict_change_leaves_frame_zero_alone():
    image, robot = sliding_box_robot()
    change = predict_change(_constant_refiner(20.0, 3.0), image, robot, batch=3)
    assert np.allclose(change.colour[1:], 20.0, atol=1e-4) and not change.colour[0].any()
    assert np.allclose(change.probability[1:], 1 / (1 + np.exp(-3.0)))
    assert not change.probability[0].any() and change.depth_m is None


def test_the_depth_head_predicts_metres_on_the_robots_scale():
    image, robot = sliding_box_robot()
    change = predict_change(_constant_refiner(0.0, 3.0, depth=0.5), image, robot, batch=3)
    metres = 0.5 * depth_scale(robot) / DEPTH_GAIN
    assert np.allclose(change.depth_m[1:], metres, atol=1e-6) and not change.depth_m[0].any()
    assert ChangeRefiner(RefinerConfig(channels=(8, 16), depth=True))(
        torch.zeros(1, INPUT_CHANNELS, 8, 8)).shape == (1, OUTPUT_CHANNELS + 1, 8, 8)


def test_move_refined_points_moves_along_the_camera_ray():
    first = np.zeros((2, 2, 3), np.float32)
    first[..., 0], first[..., 1], first[..., 2] = 0.2, -0.1, 1.0
    first[1, 1] = 0.0  # no point in frame 0: nothing to move
    points = np.full((2, 2, 2, 3), 7.0, np.float32)   # what the other options made
    depth = np.full((2, 2, 2), -0.25, np.float32)
    probability = np.array([[[0.0, 0.0], [0.0, 0.0]], [[0.9, 0.2], [0.9, 0.9]]], np.float32)
    out = move_refined_points(points, first, depth, probability, threshold=0.5)
    assert np.allclose(out[1, 0, 0], [0.15, -0.075, 0.75])  # same ray, 0.25 m nearer
    assert np.allclose(out[1, 1, 0], [0.15, -0.075, 0.75])
    assert (out[1, 0, 1] == 7).all() and (out[1, 1, 1] == 7).all() and (out[0] == 7).all()


POINTMAP_EXTRA = {"first_frame": "given", "decode": "composite", "change_threshold": 40,
                  "robot_pointmap": "kinematics"}


def _wall_scene():
    """sliding_box_robot and a scene 2 m away (the initial pointmap)."""
    image, robot = sliding_box_robot()
    points = np.zeros(image.shape, np.float32)
    points[..., 2] = 2.0
    return image, robot, points


def test_refiner_pointmap_option_moves_the_changed_points(make_tiny):
    image, robot, points = _wall_scene()
    extra = POINTMAP_EXTRA
    moved = _pipe(make_tiny, _constant_refiner(0.0, 4.0, depth=-1.0),
                  {**extra, "refiner_pointmap": "change"})
    out = moved(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1,
                initial_pointmap=points)
    off = ~robot.mask[1:] & ~robot.mask[:1]
    expected = 2.0 - depth_scale(robot) / DEPTH_GAIN
    assert np.allclose(out.pointmap[1:, ..., 2][off], expected, atol=1e-5)
    assert np.array_equal(out.pointmap[1:][robot.mask[1:]], robot.pointmap[1:][robot.mask[1:]])
    assert np.array_equal(out.pointmap[0], points)
    plain = _pipe(make_tiny, None, extra)(image, robot.rgb, robot.pointmap, robot.mask,
                                          num_steps=1, initial_pointmap=points)
    assert np.array_equal(out.rgb, plain.rgb)  # colour is the `refiner` option's, not set


def test_refiner_first_depth_is_the_initial_pointmap_of_an_rgb_rollout(make_tiny):
    image, robot = _ray_cast_robot()
    extra = {"first_frame": "given", "decode": "composite", "change_threshold": 1000,
             "change_depth_m": 0, "change_dilate": 0, "robot_pointmap": "kinematics",
             "refiner_first_depth": "estimated"}
    pipe = _pipe(make_tiny, _constant_refiner(0.0, -6.0, first=np.log(1.5)), extra)
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1)
    estimate = CAMERA.points_from_depth(np.full((32, 48), 1.5 * 0.8))  # scale 0.8 m
    robot0 = robot.mask[0]
    assert np.allclose(out.pointmap[0][~robot0], estimate[~robot0], atol=1e-4)
    # the robot's own points are known by kinematics, not estimated
    assert np.array_equal(out.pointmap[0][robot0], robot.pointmap[0][robot0])
    off = ~robot.mask[1:] & ~robot.mask[:1]  # unchanged points (threshold 1000) keep frame 0's
    later = np.broadcast_to(estimate, out.pointmap[1:].shape)
    assert np.allclose(out.pointmap[1:][off], later[off], atol=1e-4)
    assert out.metadata["initial_pointmap"] is False
    given = np.zeros(image.shape, np.float32)
    given[..., 2] = 3.0
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1,
               initial_pointmap=given)
    assert np.array_equal(out.pointmap[0], given)  # an observation wins over an estimate


def test_refiner_first_depth_needs_its_head(make_tiny):
    with pytest.raises(FailedPrecondition, match="no first_depth head"):
        _pipe(make_tiny, _constant_refiner(0.0, 1.0), {"refiner_first_depth": "estimated"})


def test_refiner_pointmap_needs_a_depth_head(make_tiny):
    with pytest.raises(FailedPrecondition, match="no depth head"):
        _pipe(make_tiny, _constant_refiner(0.0, 1.0), {"refiner_pointmap": "change"})
    with pytest.raises(FailedPrecondition, match="extra.refiner_pointmap"):
        _pipe(make_tiny, None, {"refiner_pointmap": "change"})


def _pipe(make_tiny, refiner, extra):
    components = make_tiny("act")[0]
    components.refiner = refiner
    components.info.extra = dict(extra)
    return Kinema4DPipeline(components, backend=Denoiser(components.transformer))


def test_refiner_option_shows_the_predicted_change_where_it_is_likely(make_tiny):
    image, robot = sliding_box_robot()
    extra = {"first_frame": "given", "decode": "composite", "change_threshold": 40}
    sure = _pipe(make_tiny, _constant_refiner(30.0, 4.0), {**extra, "refiner": "change"})
    out = sure(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1)
    sure_p = 1 / (1 + np.exp(-4.0))  # the change is shown weighted by its probability
    expected = np.round(np.clip(image.astype(np.float32) + np.float32(sure_p) * 30, 0, 255))
    assert np.array_equal(out.rgb[0], image)
    assert np.array_equal(out.rgb[1:], np.broadcast_to(expected, out.rgb[1:].shape))
    assert out.metadata["fidelity"]["refiner"] == "change"

    squared = _pipe(make_tiny, _constant_refiner(30.0, 4.0),
                    {**extra, "refiner": "change", "refiner_power": 2})
    out = squared(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1)
    weight = np.float32(sure_p) ** np.float32(2)
    expected = np.round(np.clip(image.astype(np.float32) + weight * 30, 0, 255))
    assert np.array_equal(out.rgb[1:], np.broadcast_to(expected, out.rgb[1:].shape))

    doubtful = _pipe(make_tiny, _constant_refiner(30.0, -4.0), {**extra, "refiner": "change"})
    plain = _pipe(make_tiny, None, extra)
    a = doubtful(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1)
    b = plain(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1)
    assert np.array_equal(a.rgb, b.rgb)  # below the threshold: the other options' output


def test_a_model_with_the_option_and_no_refiner_is_refused(make_tiny):
    with pytest.raises(FailedPrecondition, match="no refiner/ directory"):
        _pipe(make_tiny, None, {"refiner": "change"})


def test_model_directory_carries_the_refiner(make_tiny, tmp_path):
    components = make_tiny("act")[0]
    components.refiner = _constant_refiner(5.0, 1.0)
    save_k4d(components, tmp_path / "model")
    loaded = load_k4d(tmp_path / "model")
    assert torch.equal(loaded.refiner.head.bias, components.refiner.head.bias)
    components.refiner = None
    save_k4d(components, tmp_path / "plain")
    assert load_k4d(tmp_path / "plain").refiner is None


@pytest.mark.parametrize("extra", [{"refiner": "yes"}, {"refiner_threshold": 1.0},
                                   {"refiner_threshold": -0.1}, {"refiner_threshold": True},
                                   {"refiner_power": 0}, {"refiner_power": "2"},
                                   {"refiner_pointmap": "depth"},
                                   {"refiner_pointmap_threshold": 1.5},
                                   {"refiner_first_depth": "given"}])
def test_refiner_options_are_checked(extra):
    with pytest.raises(InvalidArgument):
        FidelityOptions.check(extra)


def test_show_refined_change_weights_the_change_above_the_threshold():
    image = np.full((2, 3, 3), 100, np.uint8)
    rgb = np.full((3, 2, 3, 3), 7, np.uint8)  # what the other options made
    delta = np.full((3, 2, 3, 3), 40.0, np.float32)
    probability = np.array([0.0, 0.05, 0.5, 0.9, 1.0, 0.2], np.float32).reshape(2, 3)
    probability = np.stack([np.zeros_like(probability), probability, probability])
    options = FidelityOptions(refiner="change", refiner_threshold=0.1, refiner_power=2)
    out = show_refined_change(rgb, image, delta, probability, options)
    assert (out[0] == 7).all()  # frame 0: probability 0
    shown = probability[1] > 0.1
    expected = np.round(100 + 40 * probability[1] ** 2).astype(np.uint8)
    assert np.array_equal(out[1][shown][:, 0], expected[shown])
    assert (out[1][~shown] == 7).all()


def test_a_geometry_network_gives_the_depths_and_the_points_probability(tmp_path):
    image, robot = _ray_cast_robot()
    colour = _constant_refiner(20.0, 3.0)
    combined = with_geometry(colour, _constant_refiner(0.0, -2.0, depth=0.5, first=0.0))
    change = predict_change(combined, image, robot, batch=3)
    assert np.allclose(change.colour[1:], 20.0, atol=1e-4)            # the colour network's
    assert np.allclose(change.probability[1:], 1 / (1 + np.exp(-3.0)))
    assert np.allclose(change.point_probability[1:], 1 / (1 + np.exp(2.0)))  # geometry's
    assert np.allclose(change.depth_m[1:], 0.5 * 0.8 / DEPTH_GAIN, atol=1e-6)
    assert np.allclose(change.first_depth_m, 0.8, atol=1e-6)
    plain = predict_change(colour, image, robot)
    assert plain.point_probability is plain.probability and plain.depth_m is None
    save_refiner(combined, tmp_path)
    loaded = load_refiner(tmp_path)
    assert loaded.config == combined.config and loaded.geometry.config.first_depth
    _assert_same_weights(combined, loaded)
    with pytest.raises(InvalidArgument, match="refiner.geometry"):
        with_geometry(colour, combined)


def test_with_colour_swaps_the_colour_network_and_keeps_the_others(tmp_path):
    image, robot = _ray_cast_robot()
    model = with_geometry(_constant_refiner(20.0, 3.0),
                          _constant_refiner(0.0, -2.0, depth=0.5, first=0.0))
    swapped = with_colour(model, _constant_refiner(-10.0, 1.0))
    assert swapped.config.geometry == model.config.geometry
    assert torch.equal(swapped.geometry.head.bias, model.geometry.head.bias)
    change = predict_change(swapped, image, robot, batch=3)
    assert np.allclose(change.colour[1:], -10.0, atol=1e-4)            # the new colour
    assert np.allclose(change.probability[1:], 1 / (1 + np.exp(-1.0)))
    assert np.allclose(change.point_probability[1:], 1 / (1 + np.exp(2.0)))  # kept geometry
    assert np.allclose(change.depth_m[1:], 0.5 * 0.8 / DEPTH_GAIN, atol=1e-6)
    save_refiner(swapped, tmp_path)
    _assert_same_weights(swapped, load_refiner(tmp_path))
    with pytest.raises(InvalidArgument, match="refiner.colour"):
        with_colour(model, model)


def test_depth_options_read_the_geometry_networks_heads(make_tiny):
    colour_only = with_geometry(_constant_refiner(0.0, 1.0), _constant_refiner(0.0, 1.0))
    with pytest.raises(FailedPrecondition, match="no depth head"):
        _pipe(make_tiny, colour_only, {"refiner_pointmap": "change"})
    deep_colour = with_geometry(_constant_refiner(0.0, 1.0, depth=0.0),
                                _constant_refiner(0.0, 1.0))
    with pytest.raises(FailedPrecondition, match="no depth head"):  # the geometry one counts
        _pipe(make_tiny, deep_colour, {"refiner_pointmap": "change"})
    _pipe(make_tiny, with_geometry(_constant_refiner(0.0, 1.0), _constant_refiner(
        0.0, 1.0, depth=0.0)), {"refiner_pointmap": "change"})


# The camera of CAMERA_POSE looks straight down from 1 m above the robot's base: every ray
# meets the plane z = c at depth 1 - c.
CAMERA_POSE = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 1.0],
                        [0.0, 0.0, 0.0, 1.0]])


def _plane_refiner(first: float, coordinate: tuple[float, float, float], plane: int
                   ) -> ChangeRefiner:
    """A geometry network with scene planes whose every pixel has frame 0's log depth
    `first` (over the robot's scale), base-frame plane coordinates `coordinate` and lies on
    plane `plane` (0 none, 1-3 x, y, z)."""
    config = RefinerConfig(channels=SMALL.channels, first_depth=True, scene_planes=True)
    refiner = ChangeRefiner(config).eval()
    logits = [0.0] * 4
    logits[plane] = 8.0
    with torch.no_grad():
        refiner.head.weight.zero_()
        refiner.head.bias.copy_(torch.tensor([0.0, 0.0, 0.0, -6.0, first, *coordinate,
                                              *logits]))
    return refiner


def test_scene_planes_config_adds_the_camera_inputs_and_the_plane_outputs(tmp_path):
    config = RefinerConfig(channels=(8, 16), first_depth=True, scene_planes=True)
    assert config.inputs == INPUT_CHANNELS + CAMERA_CHANNELS
    assert config.outputs == OUTPUT_CHANNELS + 1 + PLANE_CHANNELS
    assert (config.first_index, config.planes_index) == (OUTPUT_CHANNELS, OUTPUT_CHANNELS + 1)
    out = ChangeRefiner(config)(torch.zeros(1, config.inputs, 8, 8))
    assert out.shape == (1, config.outputs, 8, 8)
    save_refiner(ChangeRefiner(config), tmp_path)
    assert load_refiner(tmp_path).config == config
    with pytest.raises(InvalidArgument, match="refiner.scene_planes"):
        RefinerConfig(channels=(8, 16), scene_planes=True)  # no first_depth head


def test_base_rays_meet_the_planes_of_the_base_frame():
    _, robot = _ray_cast_robot()
    rays = BaseRays.from_robot(robot, CAMERA_POSE)
    assert np.allclose(rays.centre, [0.0, 0.0, 1.0])
    coordinate = np.broadcast_to(np.array([0.0, 0.0, 0.25])[:, None, None], (3, 32, 48))
    depth = rays.plane_depth(coordinate)
    assert np.allclose(depth[2], 0.75)                  # z = 0.25, 0.75 m below the camera
    assert np.isnan(depth[0, :, 24:]).all()             # x = 0 lies behind those rays
    points = CAMERA.points_from_depth(depth[2]) @ np.linalg.inv(CAMERA_POSE)[:3, :3].T
    assert np.allclose(points[..., 2] + 1.0, 0.25)      # and the points lie on the plane
    channels = rays.channels()
    assert channels.shape == (CAMERA_CHANNELS, 32, 48)
    assert np.allclose(np.linalg.norm(channels[:3], axis=0), 1.0) and (channels[6] == 1).all()
    assert BaseRays.from_robot(robot, None) is None


def test_depth_on_planes_keeps_the_direct_estimate_where_a_plane_is_implausible():
    _, robot = _ray_cast_robot()
    rays = BaseRays.from_robot(robot, CAMERA_POSE)
    free = np.full((32, 48), 0.9, np.float32)
    logits = np.zeros((4, 32, 48))
    logits[3] = 1.0
    logits[0, :, :10] = 2.0                              # these pixels lie on no plane
    near = np.broadcast_to(np.array([0.0, 0.0, 0.0])[:, None, None], (3, 32, 48))
    depth, plane = depth_on_planes(free, near, logits, rays)
    assert np.allclose(depth[:, 10:], 1.0) and (plane[:, 10:] == 3).all()
    assert np.allclose(depth[:, :10], 0.9) and (plane[:, :10] == 0).all()
    far = np.broadcast_to(np.array([0.0, 0.0, -1.0])[:, None, None], (3, 32, 48))
    depth, plane = depth_on_planes(free, far, logits, rays)  # 2 m: > 2x the estimate
    assert np.allclose(depth, 0.9) and not plane.any()


def test_scene_planes_give_frame_zeros_depth_with_a_camera_pose():
    image, robot = _ray_cast_robot()
    combined = with_geometry(_constant_refiner(0.0, 1.0),
                             _plane_refiner(np.log(1.2), (0.0, 0.0, 0.0), plane=3))
    change = predict_change(combined, image, robot, batch=3, T_cam_from_base=CAMERA_POSE)
    assert np.allclose(change.first_depth_m, 1.0, atol=1e-5) and (change.first_plane == 3).all()
    blind = predict_change(combined, image, robot, batch=3)  # no pose: the direct estimate
    assert np.allclose(blind.first_depth_m, 1.2 * 0.8, atol=1e-5)
    assert blind.first_plane is None


def test_an_rgb_rollout_with_a_camera_pose_reads_its_depth_off_the_planes(make_tiny):
    image, robot = _ray_cast_robot()
    extra = {"first_frame": "given", "decode": "composite", "change_threshold": 1000,
             "change_depth_m": 0, "change_dilate": 0, "robot_pointmap": "kinematics",
             "refiner_first_depth": "estimated"}
    refiner = with_geometry(_constant_refiner(0.0, -6.0),
                            _plane_refiner(np.log(1.2), (0.0, 0.0, 0.2), plane=3))
    pipe = _pipe(make_tiny, refiner, extra)
    out = pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1,
               T_cam_from_base=CAMERA_POSE)
    off = ~robot.mask[0]
    assert np.allclose(out.pointmap[0][off][:, 2], 0.8, atol=1e-5)  # the plane z = 0.2
    assert out.metadata["camera_pose"] is True
    for bad in (np.eye(4) * 2.0, np.eye(3), np.full((4, 4), np.nan)):
        with pytest.raises(InvalidArgument) as exc:
            pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1, T_cam_from_base=bad)
        assert exc.value.violations[0].field == "T_cam_from_base"


def test_refiner_pointmap_drawn_moves_the_points_where_the_colour_changes(make_tiny):
    image, robot, points = _wall_scene()
    extra = POINTMAP_EXTRA
    # the colour network sees a change everywhere; the geometry network's own mask nowhere
    refiner = with_geometry(_constant_refiner(0.0, 4.0),
                            _constant_refiner(0.0, -4.0, depth=-1.0))
    off = ~robot.mask[1:] & ~robot.mask[:1]
    moved_by = depth_scale(robot) / DEPTH_GAIN

    def run(more):
        return _pipe(make_tiny, refiner, {**extra, **more})(
            image, robot.rgb, robot.pointmap, robot.mask, num_steps=1, initial_pointmap=points)

    drawn = run({"refiner_pointmap": "drawn"})
    assert np.allclose(drawn.pointmap[1:, ..., 2][off], 2.0 - moved_by, atol=1e-5)
    # "change" reads the geometry network's own mask, which sees no change: nothing moves
    assert np.array_equal(run({"refiner_pointmap": "change"}).pointmap, run({}).pointmap)
    with pytest.raises(FailedPrecondition, match="no depth head"):
        _pipe(make_tiny, _constant_refiner(0.0, 1.0), {"refiner_pointmap": "drawn"})


def test_an_object_network_is_stored_beside_the_others_and_found_objects_averaged(tmp_path):
    image, robot = _ray_cast_robot()
    config = RefinerConfig(channels=SMALL.channels, object_logit=True)
    assert config.outputs == OUTPUT_CHANNELS + 1 and config.object_index == OUTPUT_CHANNELS
    objects = ChangeRefiner(config).eval()
    with torch.no_grad():
        objects.head.weight.zero_()
        objects.head.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 0.0, 1.5]))
    geometry = _constant_refiner(0.0, -2.0, depth=0.5, first=0.0)
    combined = with_objects(with_geometry(_constant_refiner(20.0, 3.0), geometry), objects)
    change = predict_change(combined, image, robot, batch=3)
    assert np.allclose(change.object_probability, 1 / (1 + np.exp(-1.5)), atol=1e-6)
    assert np.allclose(change.first_depth_m, 0.8, atol=1e-6)  # the geometry network's still
    assert predict_change(with_geometry(_constant_refiner(20.0, 3.0), geometry), image,
                          robot).object_probability is None
    save_refiner(combined, tmp_path)
    loaded = load_refiner(tmp_path)
    assert loaded.config == combined.config and loaded.objects.config.object_logit
    _assert_same_weights(combined, loaded)
    with pytest.raises(InvalidArgument, match="refiner.objects"):
        with_objects(combined, geometry)  # no object head
    with pytest.raises(InvalidArgument, match="refiner.objects"):
        with_objects(geometry, combined)  # it has networks of its own
