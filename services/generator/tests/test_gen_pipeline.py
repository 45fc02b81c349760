"""The sampling pipeline: conditioning tensors, determinism, guidance modes, cancellation,
input validation, memory refusal, and a golden slice of a seeded tiny output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.errors import Cancelled, InvalidArgument, ResourceExhausted
from k4d_generator.pipeline import Kinema4DPipeline
from k4d_model.conditions import (
    PointmapNormalization,
    downsample_robot_mask,
    first_frame_mask,
    uniform_pointmap,
)
from k4d_model.results import RobotCondition


@pytest.fixture
def pipe(make_tiny):
    return Kinema4DPipeline.from_components(make_tiny("act")[0])


def test_gen_uniform_pointmap_and_first_frame_mask():
    pm = uniform_pointmap(4, 5)
    assert pm.shape == (4, 5, 3)
    assert np.allclose(pm[0, :, 0], np.linspace(0, 1, 5)) and np.allclose(pm[:, 0, 1],
                                                                          np.linspace(0, 1, 4))
    assert np.allclose(pm[:, 0, 2], [1, 2 / 3, 1 / 3, 0])  # z = 1 - row / (H - 1)
    mask = first_frame_mask(1, 9, 2, 6, 4)  # 9 pixel frames -> 3 latent frames
    assert mask.shape == (1, 4, 3, 2, 6)
    assert (mask[:, :, 0, :, :3] == 1).all() and (mask[:, :, 0, :, 3:] == 0.5).all()
    assert (mask[:, :, 1:] == 0).all()


def test_gen_robot_mask_downsampling_first_nearest_then_temporal_max():
    mask = torch.zeros(1, 1, 9, 4, 4)
    mask[0, 0, 0, 0, 0] = 1  # frame 0: kept by nearest sampling (top-left of each 2x2)
    mask[0, 0, 0, 1, 1] = 1  # frame 0: dropped by nearest sampling
    mask[0, 0, 3, 2, 2] = 1  # frames 1-4 -> latent frame 1
    mask[0, 0, 8, 0, 2] = 1  # frames 5-8 -> latent frame 2
    out = downsample_robot_mask(mask, 2, 2, 4)
    assert out.shape == (1, 1, 3, 2, 2)
    assert out[0, 0, 0].tolist() == [[1, 0], [0, 0]]
    assert out[0, 0, 1].tolist() == [[0, 0], [0, 1]]
    assert out[0, 0, 2].tolist() == [[0, 1], [0, 0]]


def test_gen_pointmap_normalisation_roundtrip():
    norm = PointmapNormalization((0.1, -0.2, 1.0), 0.5)
    points = np.array([[0.3, -0.1, 1.2], [5.0, 0.0, 1.0]], np.float32)
    back = norm.denormalise(norm.normalise(points))
    assert np.allclose(back[0], points[0], atol=1e-6)
    assert back[1, 0] == pytest.approx(0.6)  # clipped to the [-1, 1] box, as the 8-bit data


def test_gen_seeded_output_is_deterministic_and_seed_dependent(pipe, robot_inputs):
    image, robot = robot_inputs
    a = pipe(image, num_steps=2, seed=7, **robot)
    b = pipe(image, num_steps=2, seed=7, **robot)
    c = pipe(image, num_steps=2, seed=8, **robot)
    assert a.rgb.shape == (5, 32, 48, 3) and a.rgb.dtype == np.uint8
    assert a.pointmap.shape == (5, 32, 48, 3) and a.pointmap.dtype == np.float32
    assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.pointmap, b.pointmap)
    assert not np.array_equal(a.pointmap, c.pointmap)
    assert a.metadata["guidance"]["passes"] == 1
    assert a.metadata["pointmap_units"] == "metres"


def test_gen_golden_slice_of_seeded_tiny_output(pipe, robot_inputs):
    image, robot = robot_inputs
    result = pipe(image, num_steps=2, seed=42, **robot)
    got = result.pointmap[2, 10, 20:24].ravel()
    golden = np.array(GOLDEN_POINTMAP_SLICE, np.float32)
    assert np.allclose(got, golden, atol=1e-4), got.tolist()
    rgb = result.rgb[2, 10, 20:24].ravel().astype(int)
    assert np.abs(rgb - np.array(GOLDEN_RGB_SLICE)).max() <= 1, rgb.tolist()


# pointmap[2, 10, 20:24] (metres) and rgb[2, 10, 20:24] of the seeded tiny `act` model
# (build_components(seed=0), synthetic robot, seed 42, 2 UniPC steps), recorded 2026-11-25.
GOLDEN_POINTMAP_SLICE = [-0.235199, 0.108922, 0.790098, -0.227947, 0.111083, 0.795134,
                         -0.243182, 0.100928, 0.807443, -0.233227, 0.11025, 0.813287]
GOLDEN_RGB_SLICE = [84, 171, 125, 85, 170, 125, 88, 169, 122, 89, 171, 122]


def test_gen_one_pass_equals_two_pass_when_conditions_identical(pipe, robot_inputs):
    image, robot = robot_inputs
    one = pipe(image, num_steps=2, seed=3, guidance=5.0, **robot)
    two = pipe(image, num_steps=2, seed=3, guidance=5.0, guidance_mode="two-pass", **robot)
    assert one.metadata["guidance"]["passes"] == 1 and two.metadata["guidance"]["passes"] == 2
    assert np.allclose(one.pointmap, two.pointmap, atol=1e-4)
    assert np.abs(one.rgb.astype(int) - two.rgb).max() <= 1


def test_gen_negative_condition_runs_batched_two_pass(pipe, robot_inputs):
    image, robot = robot_inputs
    calls = []
    backend = pipe.backend

    def spy(*inputs):
        calls.append(inputs[0].shape[0])
        return backend(*inputs)

    pipe.backend = spy
    pipe.backend.describe = backend.describe
    negative = RobotCondition.empty(5, 32, 48)
    guided = pipe(image, num_steps=2, seed=3, guidance=3.0, negative=negative, **robot)
    assert calls == [2, 2]  # both passes in one batched forward per step
    assert guided.metadata["guidance"]["reason"] == "negative condition"
    plain = pipe(image, num_steps=2, seed=3, guidance=3.0, **robot)
    assert not np.allclose(guided.pointmap, plain.pointmap)


def test_gen_official_guidance_mode_doubles_arm_latents_in_uncond_pass(make_tiny, robot_inputs):
    """The release's second pass sees arm_cond_proj added twice; with a zero projection that
    quirk vanishes and the official mode equals the one-pass result."""
    image, robot = robot_inputs
    components = make_tiny("act")[0]
    pipe = Kinema4DPipeline.from_components(components)
    one = pipe(image, num_steps=2, seed=5, **robot)
    official = pipe(image, num_steps=2, seed=5, guidance_mode="official", **robot)
    assert not np.allclose(one.pointmap, official.pointmap, atol=1e-4)
    with torch.no_grad():
        components.transformer.arm_cond_proj.weight.zero_()
        components.transformer.arm_cond_proj.bias.zero_()
    one = pipe(image, num_steps=2, seed=5, **robot)
    official = pipe(image, num_steps=2, seed=5, guidance_mode="official", **robot)
    assert np.allclose(one.pointmap, official.pointmap, atol=1e-4)


def test_gen_pmcond_variant_and_euler_scheduler(make_tiny, robot_inputs):
    image, robot = robot_inputs
    pipe = Kinema4DPipeline.from_components(make_tiny("pmcond")[0])
    result = pipe(image, num_steps=2, seed=1, scheduler="euler", shift=5.0, **robot)
    assert result.metadata["scheduler"] == "FlowMatchEulerDiscreteScheduler"
    assert result.metadata["shift"] == 5.0
    assert np.isfinite(result.pointmap).all()


def test_gen_progress_callback_and_cancellation(pipe, robot_inputs):
    image, robot = robot_inputs
    progress = []
    pipe(image, num_steps=3, seed=0, callback=lambda done, total: progress.append((done, total)),
         **robot)
    assert progress == [(1, 3), (2, 3), (3, 3)]
    with pytest.raises(Cancelled, match="after 1 of 3"):
        pipe(image, num_steps=3, seed=0, callback=lambda d, t: progress.append(d),
             should_cancel=lambda: len(progress) >= 4, **robot)


@pytest.mark.parametrize("change, field", [
    (lambda img, r: (img[:16], r), "image"),
    (lambda img, r: (img.astype(np.float32), r), "image"),
    (lambda img, r: (img, {**r, "robot_rgb": r["robot_rgb"][:4]}), "robot_rgb"),
    (lambda img, r: (img, {**r, "robot_mask": r["robot_mask"].astype(np.uint8)}), "robot_mask"),
    (lambda img, r: (img, {**r, "robot_pointmap": np.full_like(r["robot_pointmap"], np.nan)}),
     "robot_pointmap"),
])
def test_gen_bad_inputs_are_field_errors(pipe, robot_inputs, change, field):
    image, robot = change(*robot_inputs)
    with pytest.raises(InvalidArgument) as err:
        pipe(image, num_steps=2, **robot)
    assert err.value.violations[0].field == field


def test_gen_bad_sampling_arguments(pipe, robot_inputs):
    image, robot = robot_inputs
    for kwargs, field in (({"num_steps": 0}, "num_steps"), ({"guidance": -1.0}, "guidance"),
                          ({"guidance_mode": "x"}, "guidance_mode"),
                          ({"scheduler": "ddim"}, "scheduler")):
        with pytest.raises(InvalidArgument) as err:
            pipe(image, **{"num_steps": 2, **kwargs}, **robot)
        assert err.value.violations[0].field == field


@pytest.mark.parametrize("shift", [0.0, -1.0, float("nan"), float("inf")])
def test_gen_bad_shift_is_a_field_error_not_a_nan_rollout(pipe, robot_inputs, shift):
    image, robot = robot_inputs
    with pytest.raises(InvalidArgument) as err:
        pipe(image, num_steps=1, shift=shift, **robot)
    assert err.value.violations[0].field == "shift"


def test_gen_memory_estimate_refuses_what_cannot_fit(pipe, robot_inputs, monkeypatch):
    from k4d_model import memory

    image, robot = robot_inputs
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1024)
    with pytest.raises(ResourceExhausted, match="GiB"):
        pipe(image, num_steps=2, **robot)
    monkeypatch.undo()
    from k4d_model.model import get_model_config

    big = get_model_config("wan14b")
    from types import SimpleNamespace

    from k4d_model.model import Kinema4DTransformer3DModel

    with torch.device("meta"):
        cfg = Kinema4DTransformer3DModel(**big.transformer).config
    est = memory.estimate(cfg, SimpleNamespace(**big.vae), 49, 480, 720, 2, 2, "cuda:0",
                          available=80 * 1024**3)
    assert 5 < est.required_bytes / 1024**3 < 80  # two-pass bf16 at 480x720 fits on an H100
