"""The change refiner (k4d_model.refiner): its inputs, its network, its place in the model
directory, and the `refiner` output option that shows its predicted change."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.generation import FidelityOptions
from k4d_model.checkpoints import load_k4d, save_k4d
from k4d_model.fidelity import show_refined_change
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.refiner import (
    INPUT_CHANNELS,
    OUTPUT_CHANNELS,
    ChangeRefiner,
    RefinerConfig,
    load_refiner,
    predict_change,
    refiner_inputs,
    save_refiner,
)
from k4d_model.testing import CallableDenoiser as Denoiser
from k4d_model.testing import sliding_box_robot

SMALL = RefinerConfig(channels=(8, 16, 16))


def _constant_refiner(levels: float, logit: float) -> ChangeRefiner:
    """A refiner whose every pixel changes by `levels` with probability sigmoid(logit)."""
    refiner = ChangeRefiner(SMALL).eval()
    with torch.no_grad():
        refiner.head.weight.zero_()
        refiner.head.bias.copy_(torch.tensor([levels / 127.5] * 3 + [logit]))
    return refiner


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
    for (name, a), (_, b) in zip(refiner.state_dict().items(), loaded.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert load_refiner(tmp_path / "none") is None


def test_predict_change_leaves_frame_zero_alone():
    image, robot = sliding_box_robot()
    delta, probability = predict_change(_constant_refiner(20.0, 3.0), image, robot, batch=3)
    assert np.allclose(delta[1:], 20.0, atol=1e-4) and not delta[0].any()
    assert np.allclose(probability[1:], 1 / (1 + np.exp(-3.0))) and not probability[0].any()


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
                                   {"refiner_power": 0}, {"refiner_power": "2"}])
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
