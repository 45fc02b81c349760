"""The change-weighted objective (issue 21): the change map a training sample carries, the
per-cell loss weights built from it and the robot mask, and the weighted mean; condition
dropout (issue 45)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d_trainer.latents import change_map
from k4d_trainer.objective import coherence_loss, flow_matching_loss, loss_weights, moving_cells


def _clip(frames: int = 9, height: int = 32, width: int = 48) -> dict[str, np.ndarray]:
    """A grey scene at 1 m with a robot at the left edge; a 4x4 red block moves right from
    frame 5 on."""
    rgb = np.full((frames, height, width, 3), 128, np.uint8)
    points = np.zeros((frames, height, width, 3), np.float32)
    points[..., 2] = 1.0
    robot = np.zeros((frames, height, width), bool)
    robot[:, :, :4] = True
    rgb[:5, 8:12, 16:20] = (200, 30, 30)
    rgb[5:, 8:12, 32:36] = (200, 30, 30)
    return {"rgb": rgb, "pointmap": points, "robot_mask": robot}


def test_change_map_marks_the_cells_where_the_scene_changed():
    cells = change_map(_clip(), 4, 6, 4)[0]  # (F=3, 4, 6): frame 0, frames 1-4, 5-8
    assert cells.shape == (3, 4, 6)
    assert cells[0].sum() == 0 and cells[1].sum() == 0  # nothing moved before frame 5
    expected = torch.zeros(4, 6)
    expected[1, 2] = expected[1, 4] = 1.0  # where the block left and where it arrived
    torch.testing.assert_close(cells[2], expected)


def test_change_map_uses_depth_and_leaves_the_robot_out():
    clip = _clip()
    clip["rgb"][:] = 128
    clip["pointmap"][5:, 24:28, 40:44, 2] = 0.9  # 10 cm nearer: changed by depth alone
    clip["pointmap"][5:, 0:4, 24:28, 2] = 1.005  # 5 mm: not a change
    clip["rgb"][5:, 16:20, 0:4] = 0  # under the robot: not the scene's change
    cells = change_map(clip, 4, 6, 4)[0]
    assert cells[2].sum() == 1 and cells[2, 3, 5] == 1
    clip["normalised"] = np.bool_(True)  # stored [-1, 1] codes: colour alone decides
    assert change_map(clip, 4, 6, 4).sum() == 0


def test_moving_cells_are_the_changed_cells_whose_surface_moves():
    """A tracks target: of the changed cells, those whose motion half moves (an object's
    origin) get the moving weight in both halves; a changed cell that stays (a shadow) and
    a moving cell outside the change (the robot's own surface) keep theirs."""
    change = torch.zeros(1, 1, 2, 2, 4)
    change[0, 0, 1, 0, 0] = change[0, 0, 1, 0, 2] = 1  # an object moved off this cell
    change[0, 0, 1, 1, 1] = change[0, 0, 1, 1, 3] = 1  # a shadow: nothing moves there
    clean = torch.zeros(1, 16, 2, 2, 4)
    clean[0, 5, 1, 0, 2] = -3.0  # the object's surface moves (motion half, left cell)
    clean[0, 2, 1, 1, 3] = 0.3  # the shadow's encoder noise, below MOVING_CELL_MIN
    clean[0, 0, 0, 1, 3] = 9.0  # the robot's surface: moves, but no change off the robot
    moving = moving_cells(change, clean)
    assert moving[0, 0, 1, 0, 0] == 1 and moving[0, 0, 1, 0, 2] == 1  # colour and motion
    assert moving.sum() == 2
    batch = {"change": change, "arm_cond": torch.zeros(1, 20, 2, 2, 4)}
    weights = loss_weights(batch, 2.0, 1.0, 8.0, clean)
    assert weights[0, 0, 1, 0, 0] == 8 and weights[0, 0, 1, 1, 1] == 2  # moved; shadow
    assert weights[0, 0, 0, 1, 3] == 1
    assert torch.equal(loss_weights(batch, 2.0, 1.0), loss_weights(batch, 2.0, 1.0, 1.0, clean))
    with pytest.raises(ValueError, match="clean sample"):
        loss_weights(batch, 2.0, 1.0, 8.0)


def test_coherence_loss_asks_touching_moving_cells_to_err_alike():
    """Two moving cells side by side in the motion half and one alone: a common error costs
    nothing, a difference between the two costs its square times sigma squared per channel
    pair; the lone cell, the still cells and the other half's border are not compared."""
    moving = torch.zeros(1, 1, 1, 2, 6)
    moving[0, 0, 0, 0, 3:5] = 1  # two touching cells of the motion half
    moving[0, 0, 0, 1, 0] = 1  # a lone cell of the RGB half
    moving[0, 0, 0, 0, 2] = 1  # the RGB half's last column: beside the motion half, not in it
    target = torch.zeros(1, 2, 1, 2, 6)
    prediction = torch.zeros(1, 2, 1, 2, 6)
    prediction[0, :, 0, 0, 3:5] = 5.0  # the object errs as one
    prediction[0, :, 0, 1, 0] = 7.0  # the lone cell errs: no neighbour to compare with
    prediction[0, :, 0, 0, 2] = -4.0  # RGB half's last column, next to the motion half
    sigma = torch.tensor([0.5])
    assert coherence_loss(prediction, target, sigma, moving) == 0
    prediction[0, 0, 0, 0, 4] = 1.0  # channel 0 of one cell now errs 4 less
    expected = (0.5 * 4.0) ** 2 / 2  # one pair, two channels
    assert torch.isclose(coherence_loss(prediction, target, sigma, moving),
                         torch.tensor(expected))
    assert coherence_loss(prediction, target, sigma, torch.zeros_like(moving)) == 0


def test_loss_weights_take_the_largest_that_applies():
    change = torch.zeros(1, 1, 2, 2, 4)
    change[0, 0, 1, 0, 0] = 1
    change[0, 0, 1, 1, 1] = 1
    arm_cond = torch.zeros(1, 20, 2, 2, 4)
    arm_cond[0, :4, 1, 1, 1] = 1  # robot and changed: the larger weight
    arm_cond[0, :4, 0, 0, 3] = 1
    weights = loss_weights({"change": change, "arm_cond": arm_cond}, 10.0, 3.0)
    assert weights.shape == (1, 1, 2, 2, 4)
    assert weights[0, 0, 1, 0, 0] == 10 and weights[0, 0, 1, 1, 1] == 10
    assert weights[0, 0, 0, 0, 3] == 3 and weights.sum() == 10 + 10 + 3 + 13
    pmcond = loss_weights({"change": change, "arm_cond": arm_cond[..., :2]}, 1.0, 3.0)
    assert pmcond[0, 0, 1, 1, 1] == 3 and pmcond[0, 0, 1, 1, 3] == 3  # one mask, both halves


def test_weighted_loss_is_the_weighted_mean_and_unit_weights_are_the_mse():
    generator = torch.Generator().manual_seed(0)
    prediction = torch.randn(2, 16, 2, 2, 4, generator=generator)
    target = torch.randn(2, 16, 2, 2, 4, generator=generator)
    plain = flow_matching_loss(prediction, target)
    ones = flow_matching_loss(prediction, target, torch.ones(2, 1, 2, 2, 4))
    torch.testing.assert_close(ones, plain)
    weights = torch.ones(2, 1, 2, 2, 4)
    weights[0, 0, 0, 0, 0] = 9.0
    error = (prediction - target).square()
    expected = (error.sum() + 8 * error[0, :, 0, 0, 0].sum()) / (16 * (weights.sum()))
    torch.testing.assert_close(flow_matching_loss(prediction, target, weights), expected)


def test_a_heavier_weight_moves_the_gradient_to_the_changed_cells():
    weight = 10.0
    prediction = torch.zeros(1, 16, 2, 2, 4, requires_grad=True)
    target = torch.ones(1, 16, 2, 2, 4)
    change = torch.zeros(1, 1, 2, 2, 4)
    change[..., 0, 0, 0] = 1
    batch = {"change": change, "arm_cond": torch.zeros(1, 20, 2, 2, 4)}
    flow_matching_loss(prediction, target, loss_weights(batch, weight, 1.0)).backward()
    grad = prediction.grad.abs()
    assert torch.isclose(grad[0, 0, 0, 0, 0] / grad[0, 0, 1, 1, 1], torch.tensor(weight))


def _noise_inputs(samples: int = 64):
    generator = torch.Generator().manual_seed(0)
    batch = {"latents": torch.randn(samples, 4, 2, 2, 4, generator=generator),
             "condition": torch.randn(samples, 8, 2, 2, 4, generator=generator),
             "arm_cond": torch.randn(samples, 6, 2, 2, 4, generator=generator)}
    batch["arm_cond"][:, :2] = 1.0  # the robot mask channels: all robot
    return batch, torch.full((6, 2, 2, 4), -7.0)


def test_condition_dropout_swaps_the_robot_condition_and_keeps_each_samples_noise():
    from k4d_trainer.objective import noise_batch, training_schedule

    batch, no_robot = _noise_inputs()
    numbers, schedule = list(range(100, 164)), training_schedule(3.0)
    plain = noise_batch(batch, numbers, 45, schedule, 0.1, 2)
    dropped = noise_batch(batch, numbers, 45, schedule, 0.1, 2, condition_dropout=0.5,
                          no_robot=no_robot)
    again = noise_batch(batch, numbers, 45, schedule, 0.1, 2, condition_dropout=0.5,
                        no_robot=no_robot)
    for name in ("model_input", "timestep", "target"):  # the dropout draw comes last
        torch.testing.assert_close(getattr(dropped, name), getattr(plain, name), rtol=0, atol=0)
    swapped = (dropped.arm_cond == no_robot).flatten(1).all(dim=1)
    kept = (dropped.arm_cond == plain.arm_cond).flatten(1).all(dim=1)
    assert bool((swapped ^ kept).all())  # each sample: its own condition or no robot at all
    assert 16 <= int(swapped.sum()) <= 48  # about half of 64
    assert torch.equal(again.arm_cond, dropped.arm_cond)  # seeded by the sample number


def test_high_noise_share_noises_its_samples_to_high_noise_and_keeps_the_rest():
    from k4d_trainer.objective import noise_batch, training_schedule

    batch, _ = _noise_inputs()
    numbers, schedule = list(range(100, 164)), training_schedule(3.0)
    plain = noise_batch(batch, numbers, 45, schedule, 0.1, 2)
    mixed = noise_batch(batch, numbers, 45, schedule, 0.1, 2, high_noise_share=0.5)
    top = mixed.timestep == schedule[0][0]
    assert float(schedule[0][0]) == 1000.0 and float(schedule[1][0]) == 1.0
    assert 16 <= int((top & (plain.timestep != schedule[0][0])).sum()) <= 48  # about half
    # the rest are the plain run's samples; every sample keeps its noise and robot condition
    for name in ("model_input", "timestep"):
        torch.testing.assert_close(getattr(mixed, name)[~top], getattr(plain, name)[~top],
                                   rtol=0, atol=0)
    torch.testing.assert_close(mixed.target, plain.target, rtol=0, atol=0)
    torch.testing.assert_close(mixed.arm_cond, plain.arm_cond, rtol=0, atol=0)
    # at sigma 1 the noisy half is the noise itself: eps = target + x
    eps = plain.target + batch["latents"]
    torch.testing.assert_close(mixed.model_input[top, :4], eps[top])
    every = noise_batch(batch, numbers, 45, schedule, 0.1, 2, high_noise_share=1.0)
    assert bool((every.timestep == 1000.0).all())
    # a band: every timestep among the schedule's with sigma >= 0.9, not all the top one
    band = noise_batch(batch, numbers, 45, schedule, 0.1, 2, high_noise_share=1.0,
                       high_noise_min_sigma=0.9)
    sigma_of = dict(zip(schedule[0].tolist(), schedule[1].tolist(), strict=True))
    sigmas = torch.tensor([sigma_of[float(t)] for t in band.timestep])
    assert bool((sigmas >= 0.9 - 1e-6).all()) and len(set(band.timestep.tolist())) > 8
    torch.testing.assert_close(band.target, plain.target, rtol=0, atol=0)


@pytest.mark.parametrize("field, value", [("high_noise_share", -0.1),
                                          ("high_noise_share", 1.5),
                                          ("high_noise_share", float("nan")),
                                          ("high_noise_min_sigma", 0.0),
                                          ("high_noise_min_sigma", 1.2)])
def test_a_bad_high_noise_share_or_band_is_refused(field, value):
    from k4d.errors import InvalidArgument
    from k4d_trainer.config import TrainingSection

    with pytest.raises(InvalidArgument, match=f"training.{field}"):
        TrainingSection(**{field: value}).validate()


def test_condition_dropout_needs_the_no_robot_condition():
    from k4d_trainer.objective import noise_batch, training_schedule

    batch, _ = _noise_inputs(2)
    with pytest.raises(ValueError, match="no-robot condition"):
        noise_batch(batch, [0, 1], 45, training_schedule(), 0.1, 2, condition_dropout=0.1)


def test_motion_scale_scales_only_the_tracks_motion_and_keeps_the_noise():
    from k4d_trainer.objective import noise_batch, training_schedule

    batch, _ = _noise_inputs(8)
    numbers, schedule = list(range(8)), training_schedule(3.0)
    plain = noise_batch(batch, numbers, 45, schedule, 0.1, 2, "tracks")
    scaled = noise_batch(batch, numbers, 45, schedule, 0.1, 2, "tracks", motion_scale=10.0)
    torch.testing.assert_close(scaled.timestep, plain.timestep, rtol=0, atol=0)
    latents = batch["latents"]
    motion = latents[:, :, 1:, :, 2:] - latents[:, :, :1, :, 2:]
    # target = eps - x with the same eps: only x's motion moves, by (10 - 1) x the motion
    torch.testing.assert_close(plain.target[:, :, 1:, :, 2:] - scaled.target[:, :, 1:, :, 2:],
                               9.0 * motion)
    torch.testing.assert_close(scaled.target[:, :, :1], plain.target[:, :, :1])
    torch.testing.assert_close(scaled.target[..., :2], plain.target[..., :2])
