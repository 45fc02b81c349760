"""The sampling pipeline core without a serving backend: the encoders the trainer builds its
samples with (backend None), and sampling with any callable denoiser."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from k4d_model.conditions import PointmapNormalization
from k4d_model.pipeline import Kinema4DPipeline, _to_video, model_id_of
from k4d_model.testing import CallableDenoiser as Denoiser
from k4d_model.testing import sliding_box_robot as _robot


def test_model_encoders_work_without_a_backend(make_tiny):
    components = make_tiny("act")[0]
    pipe = Kinema4DPipeline(components, backend=None)
    image, robot = _robot()
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    with torch.no_grad():
        condition = pipe.prepare_condition(image)
        embeds = pipe.encode_image(image)
        arm = pipe.prepare_arm_cond(robot, norm)
        latent = pipe.encode_video(_to_video(robot.rgb.astype(np.float32) / 127.5 - 1))
    # 5 frames -> 2 latent frames; 32 x 48 -> 4 x 6, RGB | pointmap side by side
    assert condition.shape[2:] == (2, 4, 12) and latent.shape[2:] == (2, 4, 6)
    assert arm.shape[0] == 1 and arm.shape[2] == 2
    assert embeds.shape[0] == 1 and torch.isfinite(embeds).all()
    assert pipe.model_id == model_id_of(components)


def test_model_samples_with_a_callable_denoiser(make_tiny):
    components = make_tiny("act")[0]
    denoiser = Denoiser(components.transformer)
    pipe = Kinema4DPipeline(components, backend=denoiser)
    image, robot = _robot()
    kwargs = dict(robot_rgb=robot.rgb, robot_pointmap=robot.pointmap, robot_mask=robot.mask,
                  num_steps=2)
    a = pipe(image, seed=3, **kwargs)
    b = pipe(image, seed=3, **kwargs)
    c = pipe(image, seed=4, **kwargs)
    assert a.rgb.shape == (5, 32, 48, 3) and a.pointmap.shape == (5, 32, 48, 3)
    assert denoiser.calls == 6  # 2 steps x 3 calls, one pass per step (official guidance)
    assert np.array_equal(a.rgb, b.rgb) and not np.array_equal(a.rgb, c.rgb)
    assert a.metadata["backend"] == {"backend": "callable"}


def test_model_bad_steps_are_rejected(make_tiny):
    from k4d.errors import InvalidArgument

    components = make_tiny("act")[0]
    pipe = Kinema4DPipeline(components, backend=Denoiser(components.transformer))
    image, robot = _robot()
    with pytest.raises(InvalidArgument):
        pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=0)


def test_model_import_is_cheap_and_needs_no_service_package():
    code = ("import sys, k4d_model, k4d_model.registry, k4d_model.checkpoints; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('k4d_generator', 'k4d_trainer')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    cheap = subprocess.run([sys.executable, "-c", "import sys, k4d_model; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert cheap.stdout.strip() == "False"


@pytest.mark.parametrize("halves, pointmap_velocity", [("both", 3.0), ("rgb", 1.0)])
def test_guidance_halves_choose_which_half_of_the_latent_guidance_pushes(
        make_tiny, halves, pointmap_velocity):
    """RGB | pointmap sit side by side in width; `guidance_halves: rgb` guides the RGB half
    and leaves the pointmap half the conditional pass's velocity."""
    components = make_tiny("act")[0]
    components.info.extra["guidance_halves"] = halves
    latents, condition = torch.zeros(1, 4, 2, 4, 12), torch.zeros(1, 5, 2, 4, 12)

    def backend(hidden, timestep, image_embeds, arm_cond, gain):
        # the conditional pass (robot in view) answers 1, the negative one 0
        assert hidden.shape[0] == 2 and arm_cond[0].eq(1).all() and arm_cond[1].eq(0).all()
        return torch.cat([torch.ones_like(latents), torch.zeros_like(latents)])

    pipe = Kinema4DPipeline(components, backend=backend)
    arm = torch.ones(1, 3, 2, 4, 6)
    plan = pipe._guidance_plan(3.0, "auto", arm, torch.zeros_like(arm))
    assert plan["passes"] == 2 and plan["halves"] == halves
    velocity = pipe._denoise_step(latents, condition, torch.tensor(500.0),
                                  torch.zeros(1, 4, 8), arm, plan)
    assert velocity.shape == latents.shape
    assert velocity[..., :6].eq(3.0).all()  # RGB half: 0 + 3 x (1 - 0)
    assert velocity[..., 6:].eq(pointmap_velocity).all()


def _tool(frames: int, opening=None, holding: bool = False):
    from k4d.tool import ToolTrack

    opening = np.linspace(0.08, 0.0, frames) if opening is None else np.asarray(opening)
    return ToolTrack(np.repeat(np.eye(4)[None], frames, axis=0), opening, holding)


def test_model_tool_features_read_the_gripper_per_latent_frame():
    from k4d.errors import InvalidArgument
    from k4d_model.conditions import TOOL_FEATURES, tool_features

    # a per-frame VAE: one latent frame per pixel frame
    closing = tool_features(_tool(5, [0.04, 0.04, 0.02, 0.01, 0.01]), 5, 1)
    assert closing.shape == (5, TOOL_FEATURES) and closing.dtype == np.float32
    np.testing.assert_allclose(closing[:, 0], [1, 1, 0.5, 0.25, 0.25])  # over the widest
    np.testing.assert_allclose(closing[:, 1], [0, 0, -0.5, -0.75, -0.75])  # from frame 0
    np.testing.assert_allclose(closing[:, 2], 0.0)  # not holding
    np.testing.assert_allclose(closing[:, 3], [0, 0.25, 0.5, 0.75, 1])  # place in the clip
    # a video VAE of stride 4: latent frame k reads pixel frame 4k
    strided = tool_features(_tool(9, np.arange(9.0), holding=True), 3, 4)
    np.testing.assert_allclose(strided[:, 0], [0, 0.5, 1])
    np.testing.assert_allclose(strided[:, 2], 1.0)
    # a robot without a gripper reads zeros, not a division by zero
    assert not tool_features(_tool(5, np.zeros(5)), 5, 1)[:, :2].any()
    with pytest.raises(InvalidArgument, match="tool"):
        tool_features(_tool(4), 5, 1)


def _moving_tool(frames: int):
    """A tool moving 0.1 m along the base's x per frame, its gripper closing."""
    from k4d.tool import ToolTrack

    poses = np.repeat(np.eye(4)[None], frames, axis=0)
    poses[:, 0, 3] = 0.1 * np.arange(frames)
    return ToolTrack(poses, np.linspace(0.08, 0.0, frames))


def test_model_tool_position_features_see_the_tool_through_the_camera():
    from k4d_model.conditions import (
        TOOL_FEATURES,
        TOOL_POSITION_FEATURES,
        tool_condition,
        tool_features,
        tool_position_features,
    )

    # the camera 1 m in front of the base, its x along the base's y, its y along the base's x
    T_cam_from_base = np.array([[0.0, 1, 0, 0], [1, 0, 0, 0], [0, 0, -1, 1], [0, 0, 0, 1]])
    norm = PointmapNormalization((0.0, 0.0, 1.0), 0.5)
    features = tool_position_features(_moving_tool(9), 3, 4, T_cam_from_base, norm)
    assert features.shape == (3, TOOL_POSITION_FEATURES) and features.dtype == np.float32
    # latent frame k reads pixel frame 4k: the tool at base x 0, 0.4, 0.8 -> camera y
    np.testing.assert_allclose(features[:, :3], [[0, 0, 0], [0, 0.8, 0], [0, 1, 0]], atol=1e-6)
    # the displacement from frame 0 is not clipped: 0.8 m over a 0.5 m scale
    np.testing.assert_allclose(features[:, 3:], [[0, 0, 0], [0, 0.8, 0], [0, 1.6, 0]], atol=1e-6)

    both = tool_condition(_moving_tool(9), 3, 4, TOOL_FEATURES + TOOL_POSITION_FEATURES,
                          T_cam_from_base, norm)
    np.testing.assert_array_equal(both[:, :TOOL_FEATURES], tool_features(_moving_tool(9), 3, 4))
    np.testing.assert_array_equal(both[:, TOOL_FEATURES:], features)
    np.testing.assert_array_equal(tool_condition(_moving_tool(9), 3, 4, TOOL_FEATURES),
                                  tool_features(_moving_tool(9), 3, 4))
    with pytest.raises(ValueError, match="camera pose"):
        tool_condition(_moving_tool(9), 3, 4, TOOL_FEATURES + TOOL_POSITION_FEATURES)
    with pytest.raises(ValueError, match="got 5"):
        tool_condition(_moving_tool(9), 3, 4, 5)


def test_model_a_tool_position_model_needs_the_camera_pose(make_tiny):
    from k4d.errors import FailedPrecondition
    from k4d_model.conditions import TOOL_FEATURES, TOOL_POSITION_FEATURES

    components = make_tiny("act")[0]
    components.transformer.add_tool_embedding(TOOL_FEATURES + TOOL_POSITION_FEATURES)
    with torch.no_grad():  # a trained embedding: the tool's place changes the frames
        torch.nn.init.normal_(components.transformer.tool_embedding[2].weight, std=0.5)
    pipe = Kinema4DPipeline(components, backend=Denoiser(components.transformer))
    assert pipe.reads_tool and pipe.reads_tool_position
    image, robot = _robot()
    kwargs = dict(robot_rgb=robot.rgb, robot_pointmap=robot.pointmap, robot_mask=robot.mask,
                  num_steps=2, seed=3, tool=_moving_tool(5))
    with pytest.raises(FailedPrecondition, match="T_cam_from_base"):
        pipe(image, **kwargs)
    near = pipe(image, T_cam_from_base=np.eye(4), **kwargs)
    turned = np.array([[0.0, -1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    aside = pipe(image, T_cam_from_base=turned, **kwargs)  # the tool moves along y, not x
    assert near.metadata["tool_read"] and near.metadata["camera_pose"]
    assert not np.array_equal(near.rgb, aside.rgb)
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    with pytest.raises(FailedPrecondition, match="T_cam_from_base"):
        pipe.decoded_sample(image, robot, norm, num_steps=1, tool=_moving_tool(5))
    rgb, _ = pipe.decoded_sample(image, robot, norm, num_steps=1, tool=_moving_tool(5),
                                 T_cam_from_base=np.eye(4))
    assert rgb.shape[0] == 5


def test_model_a_tool_reading_model_samples_with_the_tool_and_refuses_without(make_tiny):
    from k4d.errors import FailedPrecondition

    components = make_tiny("act")[0]
    components.transformer.add_tool_embedding(4)
    with torch.no_grad():  # a trained embedding: different tools, different frames
        torch.nn.init.normal_(components.transformer.tool_embedding[2].weight, std=0.5)
    pipe = Kinema4DPipeline(components, backend=Denoiser(components.transformer))
    image, robot = _robot()
    kwargs = dict(robot_rgb=robot.rgb, robot_pointmap=robot.pointmap, robot_mask=robot.mask,
                  num_steps=2, seed=3)
    with pytest.raises(FailedPrecondition, match="tool track"):
        pipe(image, **kwargs)
    closing = pipe(image, tool=_tool(5), **kwargs)
    opening = pipe(image, tool=_tool(5, np.linspace(0.0, 0.08, 5)), **kwargs)
    assert closing.metadata["tool"] and closing.metadata["tool_read"]
    assert not np.array_equal(closing.rgb, opening.rgb)
    # a model without the condition records the tool and reads nothing of it
    plain = make_tiny("act")[0]
    result = Kinema4DPipeline(plain, backend=Denoiser(plain.transformer))(image, tool=_tool(5),
                                                                           **kwargs)
    assert result.metadata["tool"] and not result.metadata["tool_read"]
