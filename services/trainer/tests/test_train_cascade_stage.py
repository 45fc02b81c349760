"""The cascade stage (k4d_trainer.cascade_stage): its recipe section, its loss, its examples,
its training (resumable to the same weights), and a whole run that samples rollouts with the
trained transformer on episodes it never trained on, trains the sample refiner, commits it,
publishes it inside the model and loads it again when resumed."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from k4d.errors import InvalidArgument
from k4d.store import LocalStore
from k4d_model import registry
from k4d_model.cascade import (
    CHANGE_CHANNELS,
    FLOW_SCALE,
    POINT_GAIN,
    SAMPLE_CHANNELS,
    CascadeConfig,
)
from k4d_model.checkpoints import build_components, load_model, save_k4d
from k4d_model.model.configs import get_model_config
from k4d_trainer import cascade_stage
from k4d_trainer.cascade_stage import (
    FOLDER,
    ROLLOUTS_FOLDER,
    STAGE_FOLDER,
    cascade_loss,
    cascade_source_step,
    claim_cascade_source,
    load_run_cascade,
    rollout_example,
    sampling_share,
    train_cascade,
    with_flow,
)
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import CascadeSection, DataSection, config_from_dict, load_config_file
from k4d_trainer.data import open_source
from k4d_trainer.parallel import DistInfo
from k4d_trainer.runs import RunDir
from k4d_trainer.trainer import Trainer

REPO = Path(__file__).resolve().parents[3]
SECTION = CascadeSection(steps=6, batch_size=2, lr=2e-3, warmup_steps=2, channels=[8, 16],
                         checkpoint_every=2, log_every=1)
T, H, W = 4, 8, 12


class Stop(Exception):
    pass


def _rollout(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.zeros((T, H, W), bool)
    mask[:, :2, :2] = True
    known = np.ones((T, H, W), bool)
    known[:, -1] = False
    return {"image": rng.integers(0, 256, (H, W, 3), dtype=np.uint8),
            "rgb": rng.uniform(-1, 1, (T, H, W, 3)).astype(np.float16),
            "pointmap": rng.uniform(-1, 1, (T, H, W, 3)).astype(np.float16),
            "reference": rng.uniform(-1, 1, (H, W, 3)).astype(np.float16),
            "target_rgb": rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8),
            "target_points": rng.uniform(0.5, 1.5, (T, H, W, 3)).astype(np.float32),
            "known": known, "robot_mask": mask, "scale": np.float32(0.5)}


def test_examples_are_the_change_from_frame_zero():
    arrays = _rollout()
    example = rollout_example(arrays)
    assert example.x.shape == (T - 1, SAMPLE_CHANNELS, H, W)
    image = arrays["image"].astype(np.float32)
    expected = (arrays["target_rgb"][2].astype(np.float32) - image) / 127.5
    assert np.allclose(example.colour[1].permute(1, 2, 0).numpy(), expected, atol=1e-6)
    moved = (arrays["target_points"][2] - arrays["target_points"][0]) * POINT_GAIN / 0.5
    assert np.allclose(example.points[1].permute(1, 2, 0).numpy(), moved, atol=1e-4)
    assert example.off_robot[:, 0, :2, :2].sum() == 0 and example.off_robot[:, 0, 2:].all()
    assert example.known[:, 0, -1].sum() == 0  # unknown depth: no point loss


def test_context_reaches_the_examples_and_the_network():
    section = CascadeSection(steps=2, batch_size=2, channels=[8, 16], context=1)
    example = rollout_example(_rollout(), section.context)
    assert example.x.shape == (T - 1, SAMPLE_CHANNELS + 2 * CHANGE_CHANNELS, H, W)
    network, _ = train_cascade([example], section, DistInfo(), seed=0, log=lambda _: None)
    assert network.config == CascadeConfig(channels=(8, 16), context=1)


def test_loss_counts_colour_off_the_robot_and_points_where_depth_is_known():
    example = rollout_example(_rollout())
    batch = example.take(slice(0, 1))
    perfect = torch.cat([batch.colour, batch.points], dim=1)
    loss, parts = cascade_loss(perfect, batch, SECTION)
    assert float(loss) == pytest.approx(0.0, abs=1e-9)
    off_pixels = perfect.clone()
    off_pixels[:, :, :2, :2] += 5.0  # the robot's pixels do not count
    off_pixels[:, 3:, -1] += 5.0     # nor the points of unknown depth
    _, parts = cascade_loss(off_pixels, batch, SECTION)
    assert parts["colour"] == pytest.approx(0.0, abs=1e-9)
    assert parts["points"] == pytest.approx(0.0, abs=1e-9)
    wrong = perfect.clone()
    wrong[:, :3] += 0.5
    wrong[:, 3:] += 0.2
    loss, parts = cascade_loss(wrong, batch, SECTION)
    assert parts["colour"] == pytest.approx(0.25, rel=1e-5)
    assert parts["points"] == pytest.approx(0.2, rel=1e-4)
    assert float(loss) == pytest.approx(0.25 + SECTION.point_weight * 0.2, rel=1e-4)
    absolute = dataclasses.replace(SECTION, colour_loss="l1")
    loss, parts = cascade_loss(wrong, batch, absolute)
    assert parts["colour"] == pytest.approx(0.5, rel=1e-5)  # |0.5|, not 0.5 ** 2
    assert float(loss) == pytest.approx(0.5 + SECTION.point_weight * 0.2, rel=1e-4)


def test_changed_weight_weighs_the_colour_where_the_ground_truth_changed():
    arrays = _rollout()
    target = np.repeat(arrays["image"][None], T, axis=0)  # nothing changes ...
    # ... but a patch in frame 2, by 128 levels
    target[2, 4:6, 6:9] = (arrays["image"][4:6, 6:9].astype(int) + 128) % 256
    points = np.repeat(arrays["target_points"][:1], T, axis=0)
    example = rollout_example({**arrays, "target_rgb": target, "target_points": points})
    changed = example.changed[:, 0].numpy().astype(bool)
    expected = np.zeros_like(changed)
    expected[1, 4:6, 6:9] = True  # frame 2 is the examples' second frame
    assert np.array_equal(changed, expected)
    points[3, 1:3, 8:10, 2] += 0.05  # 5 cm deeper: changed by depth, not colour
    example = rollout_example({**arrays, "target_rgb": target, "target_points": points})
    assert example.changed[2, 0, 1:3, 8:10].all() and example.changed[2, 0].sum() == 4
    points[3, 0:2, 0:2, 2] += 0.05  # ... but never on the robot's pixels
    example = rollout_example({**arrays, "target_rgb": target, "target_points": points})
    assert example.changed[2, 0, :2, :2].sum() == 0

    batch = example.take(slice(1, 2))
    wrong = torch.cat([batch.colour, batch.points], dim=1)
    wrong[:, :3, 4:6, 6:9] += 0.5  # wrong by 0.5 on the 6 changed pixels alone
    off = float(batch.off_robot.sum())
    _, parts = cascade_loss(wrong, batch, SECTION)
    assert parts["colour"] == pytest.approx(0.25 * 6 / off, rel=1e-5)
    _, parts = cascade_loss(wrong, batch, dataclasses.replace(SECTION, changed_weight=4.0))
    assert parts["colour"] == pytest.approx(0.25 * 4 * 6 / (off + 3 * 6), rel=1e-5)


def test_the_gate_learns_where_the_ground_truth_changed():
    arrays = _rollout()
    target = np.repeat(arrays["image"][None], T, axis=0)
    target[2, 4:6, 6:9] = (arrays["image"][4:6, 6:9].astype(int) + 128) % 256
    points = np.repeat(arrays["target_points"][:1], T, axis=0)
    example = rollout_example({**arrays, "target_rgb": target, "target_points": points})
    batch = example.take(slice(1, 2))
    section = dataclasses.replace(SECTION, gate=True, gate_weight=0.5)
    output = torch.cat([batch.colour, batch.points, torch.zeros(1, 1, H, W)], dim=1)
    sure = output.clone()
    sure[:, -1] = torch.where(batch.changed[:, 0] > 0, 20.0, -20.0)
    loss, parts = cascade_loss(sure, batch, section)
    assert parts["gate"] == pytest.approx(0.0, abs=1e-6) and parts["gate_acc"] == 1.0
    assert float(loss) == pytest.approx(0.0, abs=1e-6)
    sure[:, -1, :2, :2] = 20.0  # the robot's pixels do not count
    assert cascade_loss(sure, batch, section)[1]["gate_acc"] == 1.0
    loss, parts = cascade_loss(output, batch, section)  # unsure everywhere: log 2
    assert parts["gate"] == pytest.approx(np.log(2.0), rel=1e-5)
    assert float(loss) == pytest.approx(0.5 * np.log(2.0), rel=1e-5)
    assert "gate" not in cascade_loss(output[:, :6], batch, SECTION)[1]  # without a gate
    trained = CascadeSection(steps=60, batch_size=3, lr=1e-2, warmup_steps=0,
                             channels=[8, 16], gate=True, gate_weight=1.0)
    network, losses = train_cascade([example], trained, DistInfo(), seed=0,
                                    log=lambda _: None)
    assert network.config.gate and losses[-1] < 0.5 * losses[0]
    with torch.no_grad():
        logit = network(example.x)[:, -1]
    changed, off = example.changed[:, 0] > 0, example.off_robot[:, 0] > 0
    assert float(logit[changed].mean()) > float(logit[off & ~changed].mean())


def _with_flow_targets(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rollout with flow targets: 8 px left everywhere, valid but in the last column."""
    flow = np.zeros((T, H, W, 2), np.float32)
    flow[..., 0] = -8.0
    valid = np.ones((T, H, W), bool)
    valid[:, :, -1] = False
    return {**arrays, "flow": flow, "flow_valid": valid}


def test_warp_examples_carry_the_flow_and_the_loss_counts_it_where_valid():
    plain = rollout_example(_rollout())
    assert plain.flow is None and plain.flow_known is None
    example = rollout_example(_with_flow_targets(_rollout()))
    assert torch.allclose(example.flow[:, 0], torch.tensor(-8.0 / FLOW_SCALE))
    known = example.flow_known[:, 0]
    assert known[:, :, -1].sum() == 0 and known[:, :2, :2].sum() == 0  # nor on the robot
    assert known[:, 2:, :-1].all()
    section = dataclasses.replace(SECTION, warp=True, flow_weight=0.5)
    batch = example.take(slice(0, 1))
    output = torch.cat([batch.colour, batch.points, batch.flow, torch.zeros(1, 1, H, W)], 1)
    loss, parts = cascade_loss(output, batch, section)
    assert float(loss) == pytest.approx(0.0, abs=1e-9) and parts["flow"] == 0.0
    output[:, 6:8, :, -1] += 3.0  # where the flow is not valid: not counted
    output[:, 6, :2, :2] += 3.0   # nor on the robot
    assert cascade_loss(output, batch, section)[1]["flow"] == pytest.approx(0.0, abs=1e-9)
    output[:, 6:8] += 0.25
    loss, parts = cascade_loss(output, batch, section)
    assert parts["flow"] == pytest.approx(0.25, rel=1e-5)
    assert parts["flow_still"] == pytest.approx(8.0 / FLOW_SCALE / 2, rel=1e-5)  # dx, dy
    assert float(loss) == pytest.approx(0.5 * 0.25, rel=1e-5)
    assert "flow" not in cascade_loss(output[:, :6], batch, SECTION)[1]  # without warp


@pytest.mark.parametrize("matching", [0, 8])
def test_a_warping_refiner_trains_on_flow_targets(matching):
    # the flow learns from its own targets (the warp does not pass the colour's gradient);
    # with `matching`, the matcher and the U-Net's correction of it
    section = CascadeSection(steps=40, batch_size=3, lr=5e-3, warmup_steps=0, channels=[8, 16],
                             warp=True, flow_weight=2.0, matching=matching)
    examples = [rollout_example(_with_flow_targets(_rollout(i))) for i in range(2)]
    network, losses = train_cascade(examples, section, DistInfo(), seed=0, log=lambda _: None)
    assert network.config == CascadeConfig(channels=(8, 16), warp=True, matching=matching)
    assert (network.matcher is not None) == bool(matching)
    assert len(losses) == section.steps and all(np.isfinite(losses))
    with torch.no_grad():
        flow = network(examples[0].x)[:, 6:8]  # it starts at 0; the targets are (-0.5, 0)
    assert float(flow[:, 0].mean()) < -0.25 and abs(float(flow[:, 1].mean())) < 0.1


def test_the_flow_targets_come_from_the_episode_only_with_warp(tmp_path, make_dataset):
    arrays = _rollout()
    plain = make_dataset(tmp_path / "plain", count=1, frames=T, height=H, width=W)
    dataset = open_source(DataSection(uri=plain), None)
    assert with_flow(arrays, dataset, "ep000", ClipSpec(T, H, W), SECTION) is arrays
    with pytest.raises(InvalidArgument, match=r"cascade\.warp.*object_ids"):
        with_flow(arrays, dataset, "ep000", ClipSpec(T, H, W),
                  dataclasses.replace(SECTION, warp=True))


def _train(examples, run=None, stop_at=None):
    def log(line: str) -> None:
        if stop_at is not None and line.startswith(f"cascade step {stop_at}/"):
            raise Stop(line)

    return train_cascade(examples, SECTION, DistInfo(), seed=3, run=run, log=log)


def test_stage_trains_and_resumes_to_the_same_weights(tmp_path):
    examples = [rollout_example(_rollout(i)) for i in range(2)]
    straight, straight_losses = _train(examples)
    assert len(straight_losses) == SECTION.steps and all(np.isfinite(straight_losses))
    run = RunDir(str(tmp_path / "run"))
    with pytest.raises(Stop):
        _train(examples, run=run, stop_at=5)  # saved at 4
    assert run.exists(f"{STAGE_FOLDER}/latest.json")
    resumed, resumed_losses = _train(examples, run=run)
    assert resumed_losses == straight_losses
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_training_lowers_the_loss(tmp_path):
    examples = [rollout_example(_rollout(0))]
    section = CascadeSection(steps=60, batch_size=3, lr=5e-3, warmup_steps=0, channels=[8, 16])
    _, losses = train_cascade(examples, section, DistInfo(), seed=0, log=lambda _: None)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])


def test_sampling_share_splits_by_rank_or_leaves_it_to_rank_zero():
    ids = [f"e{i}" for i in range(5)]
    assert sampling_share(ids, DistInfo(rank=1, world_size=2), every_rank=True) == ["e1", "e3"]
    assert sampling_share(ids, DistInfo(rank=0, world_size=2), every_rank=False) == ids
    assert sampling_share(ids, DistInfo(rank=1, world_size=2), every_rank=False) == []


BASE = {"recipe": "from-scratch", "model": {"size": "tiny"}, "data": {"uri": "/data/train"}}


@pytest.mark.parametrize("overrides, field", [
    ({"cascade": {"steps": 5}, "model": {"size": "tiny", "fidelity": {
        "decode": "relative", "cascade": "sample"}}}, "cascade.data_uri"),
    ({"cascade": {"steps": 5, "data_uri": "/data/train/"}, "model": {"size": "tiny", "fidelity": {
        "decode": "relative", "cascade": "sample"}}}, "cascade.data_uri"),
    ({"cascade": {"steps": 5, "data_uri": "/data/other"}}, "cascade.steps"),
    ({"model": {"size": "tiny", "fidelity": {"decode": "relative", "cascade": "sample"}}},
     "model.fidelity.cascade"),
    ({"cascade": {"batch_size": 0}}, "cascade.batch_size"),
    ({"cascade": {"lr": 0.0}}, "cascade.lr"),
    ({"cascade": {"point_weight": -1.0}}, "cascade.point_weight"),
    ({"cascade": {"colour_loss": "l2"}}, "cascade.colour_loss"),
    ({"cascade": {"changed_weight": 0.0}}, "cascade.changed_weight"),
    ({"cascade": {"changed_weight": float("nan")}}, "cascade.changed_weight"),
    ({"cascade": {"flow_weight": -0.1}}, "cascade.flow_weight"),
    ({"cascade": {"flow_weight": float("inf")}}, "cascade.flow_weight"),
    ({"cascade": {"warp": "maybe"}}, "cascade.warp"),
    ({"cascade": {"flow_pixels": "table"}}, "cascade.flow_pixels"),
    ({"cascade": {"matching": 16}}, "cascade.matching"),  # needs warp
    ({"cascade": {"warp": True, "matching": -1}}, "cascade.matching"),
    ({"cascade": {"channels": [12]}}, "cascade.channels"),
    ({"cascade": {"lr_schedule": "step"}}, "cascade.lr_schedule"),
    ({"cascade": {"context": -1}}, "cascade.context"),
    ({"cascade": {"context": 7}}, "cascade.context"),
    ({"cascade": {"samples": 0}}, "cascade.samples"),
    ({"cascade": {"samples": 9}}, "cascade.samples"),
    ({"cascade": {"max_episodes": -1}}, "cascade.max_episodes"),
    ({"cascade": {"gate": True, "gate_weight": -1.0}}, "cascade.gate_weight"),
    ({"cascade": {"gate_weight": float("nan")}}, "cascade.gate_weight"),
    ({"cascade": {"stpes": 3}}, "cascade.stpes"),
])
def test_cascade_section_is_checked(overrides, field):
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        config_from_dict({**BASE, **overrides})


def test_the_stage_redoes_what_another_transformer_step_made(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    lines: list[str] = []
    for folder in (FOLDER, STAGE_FOLDER, ROLLOUTS_FOLDER):
        run.write_bytes(f"{folder}/kept.bin", b"x")
    claim_cascade_source(run, 200, DistInfo(), lines.append)  # an unrecorded source
    assert cascade_source_step(run) == 200
    assert not any(run.exists(folder) for folder in (FOLDER, STAGE_FOLDER, ROLLOUTS_FOLDER))
    assert "(unrecorded)" in lines[0] and "step 200, 1 sample(s)" in lines[0]

    run.write_bytes(f"{ROLLOUTS_FOLDER}/ep000.npz", b"x")
    claim_cascade_source(run, 200, DistInfo(), lines.append)  # the same step: all kept
    assert run.exists(f"{ROLLOUTS_FOLDER}/ep000.npz") and len(lines) == 1
    run.write_bytes(f"{FOLDER}/COMMITTED", b"{}")
    claim_cascade_source(run, 200, DistInfo(), lines.append, samples=2)  # only more samples:
    assert run.exists(f"{ROLLOUTS_FOLDER}/ep000.npz") and not run.exists(FOLDER)  # kept
    assert "training again on the stored rollouts" in lines[1]
    claim_cascade_source(run, 300, DistInfo(), lines.append, samples=2)
    assert not run.exists(ROLLOUTS_FOLDER) and cascade_source_step(run) == 300
    assert "from transformer step 200, 2 sample(s)" in lines[2]


def test_a_rollout_stored_with_more_samples_gives_its_first():
    one, two = _rollout(0), _rollout(1)
    both = {**one, "rgb": np.stack([one["rgb"], two["rgb"]]),
            "pointmap": np.stack([one["pointmap"], two["pointmap"]])}
    assert torch.equal(rollout_example(both, samples=1).x, rollout_example(one).x)
    assert rollout_example(both, samples=2).x.shape[1] == CascadeConfig(samples=2).inputs


def test_a_tracks_models_rollouts_hold_the_frames_its_refiner_reads(tmp_path, make_dataset):
    """A `latent_target: tracks` model's rollout stores what its refiner reads at inference
    (Kinema4DPipeline.refiner_input): frame 0 carried along the sampled motion, measured from
    frame 0 itself, not the decoded colour against the VAE's static clip."""
    from k4d.episodes import open_dataset
    from k4d_model.checkpoints import build_components
    from k4d_model.conditions import PointmapNormalization
    from k4d_model.model.configs import get_model_config
    from k4d_model.pipeline import Kinema4DPipeline, sample_seed
    from k4d_model.results import RobotCondition
    from k4d_model.testing import CallableDenoiser
    from k4d_trainer.clips import read_clip

    dataset = open_dataset(make_dataset(tmp_path / "ds", count=1, frames=5, height=32, width=48))
    clip = read_clip(dataset.open(dataset.episode_ids[0]), ClipSpec(5, 32, 48))
    components, _ = build_components(get_model_config("tiny"), seed=0)
    components.info.extra = {"latent_target": "tracks", "decode": "relative"}
    pipe = Kinema4DPipeline(components, CallableDenoiser(components.transformer))
    arrays = cascade_stage.rollout_arrays(pipe, clip, seed=7)
    first = clip["rgb"][0] / 127.5 - 1.0
    np.testing.assert_allclose(arrays["reference"].astype(np.float32), first, atol=1e-3)
    robot = RobotCondition(clip["robot_rgb"], clip["robot_pointmap"].astype(np.float32),
                           clip["robot_mask"])
    norm = PointmapNormalization.from_points(robot.pointmap, robot.mask)
    frames, points = pipe.refiner_input(
        clip["rgb"][0], robot,
        *pipe.decoded_sample(clip["rgb"][0], robot, norm, seed=sample_seed(7, 0)), norm)
    np.testing.assert_allclose(arrays["rgb"].astype(np.float32), frames, atol=2e-3)
    np.testing.assert_allclose(arrays["pointmap"].astype(np.float32), points, atol=2e-2)
    np.testing.assert_allclose(arrays["rgb"][0].astype(np.float32), first, atol=1e-3)
    assert np.abs(arrays["rgb"][1:].astype(np.float32) - first).mean() > 0.01  # it moved


def test_a_run_samples_rollouts_trains_commits_and_publishes_the_cascade(
        tmp_path, recipe, make_dataset, tiny_official):
    data = make_dataset(tmp_path / "data", count=2, frames=5, height=32, width=48)
    other = make_dataset(tmp_path / "other", count=3, frames=5, height=32, width=48)
    store_dir = tmp_path / "store"
    path = recipe(tmp_path, data, str(tiny_official),
                  model={"fidelity": {"first_frame": "given", "decode": "relative",
                                      "cascade": "sample"}},
                  training={"steps": 2, "global_batch_size": 2, "lr": 1e-3, "warmup_steps": 0},
                  cascade={"steps": 3, "data_uri": other, "batch_size": 2, "channels": [8, 16],
                           "warmup_steps": 0},
                  publish={"name": "cascaded", "version": "1", "store_uri": store_dir.as_uri()})
    config = load_config_file(path)
    trainer = Trainer.build(config, str(tmp_path / "run"))
    try:
        status = trainer.train()
    finally:
        trainer.close()
    assert status.state == "succeeded", status.error
    run = RunDir(str(tmp_path / "run"))
    assert sorted(p.name for p in (tmp_path / "run" / ROLLOUTS_FOLDER).iterdir()) == [
        "ep000.npz", "ep001.npz", "ep002.npz"]
    committed = load_run_cascade(run)
    assert committed is not None and trainer.components.cascade is not None
    local = registry.fetch(LocalStore(store_dir), "cascaded", "1", tmp_path / "cache")
    published = load_model(local)
    assert torch.equal(published.cascade.head.weight, committed.head.weight)
    assert published.info.extra["cascade"] == "sample"

    config.publish.name = None  # published once: versions are immutable
    again = Trainer.build(config, str(tmp_path / "run"), resume=True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("k4d_trainer.cascade_stage.train_cascade",
                          lambda *a, **k: pytest.fail("trained again"))
            assert again.train().state == "succeeded"
    finally:
        again.close()
    for (name, a), (_, b) in zip(committed.state_dict().items(),
                                 again.components.cascade.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert cascade_source_step(run) == 2

    # resumed with more transformer steps and two samples a rollout: sampled, trained again
    config.training.steps, config.cascade.samples = 3, 2
    more = Trainer.build(config, str(tmp_path / "run"), resume=True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            rolled: list[str] = []
            real = cascade_stage.rollout_arrays
            patch.setattr("k4d_trainer.cascade_stage.rollout_arrays",
                          lambda pipe, clip, seed, samples, stored, tool, pose: rolled.append(
                              seed) or real(pipe, clip, seed, samples, stored, tool, pose))
            assert more.train().state == "succeeded"
    finally:
        more.close()
    assert len(rolled) == 3 and cascade_source_step(run) == 3
    assert load_run_cascade(run).config.samples == 2
    with np.load(tmp_path / "run" / ROLLOUTS_FOLDER / "ep000.npz") as stored:
        two = dict(stored)
    assert two["rgb"].shape[0] == 2 and two["pointmap"].shape == two["rgb"].shape
    assert not np.array_equal(two["rgb"][0], two["rgb"][1])  # other noise

    config.cascade.samples = 3  # the same transformer: the stored samples kept, one drawn
    third = Trainer.build(config, str(tmp_path / "run"), resume=True)
    try:
        assert third.train().state == "succeeded"
    finally:
        third.close()
    with np.load(tmp_path / "run" / ROLLOUTS_FOLDER / "ep000.npz") as stored:
        assert stored["rgb"].shape[0] == 3
        assert np.array_equal(stored["rgb"][:2], two["rgb"])
        assert np.array_equal(stored["target_rgb"], two["target_rgb"])
    assert load_run_cascade(run).config.samples == 3


def _demo_model(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "examples/train/demo_model.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_demo_model_cascade_gives_an_exported_model_a_refiner_of_its_own_rollouts(
        tmp_path, recipe, make_dataset):
    data = make_dataset(tmp_path / "data", count=2, frames=5, height=32, width=48)
    other = make_dataset(tmp_path / "other", count=2, frames=5, height=32, width=48)
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    save_k4d(saved, tmp_path / "stage1")
    model = {"size": "tiny", "init": str(tmp_path / "stage1"), "activation_checkpointing": False}
    common = {"recipe": "from-scratch",
              "training": {"steps": 2, "global_batch_size": 2, "lr": 1e-3, "warmup_steps": 0},
              "checkpoint": {"every": 1, "keep": 0}}
    (tmp_path / "plain").mkdir()
    plain = recipe(tmp_path / "plain", data, None, model=model, **common)
    trainer = Trainer.build(load_config_file(plain), str(tmp_path / "run"))
    try:
        assert trainer.train().state == "succeeded"
    finally:
        trainer.close()
    exported = _demo_model("export", "--config", str(plain), "--run", str(tmp_path / "run"),
                           "--out", str(tmp_path / "model"))
    assert exported.returncode == 0, exported.stderr
    assert load_model(tmp_path / "model" / "weights").cascade is None
    before = load_model(tmp_path / "model" / "weights").transformer.state_dict()

    refused = _demo_model("cascade", "--config", str(plain), "--run", str(tmp_path / "gated"),
                          "--model", str(tmp_path / "model"))
    assert refused.returncode != 0 and "has no cascade section" in refused.stderr

    (tmp_path / "gate").mkdir()
    gated = recipe(tmp_path / "gate", data, None, **common, model={
        **model, "fidelity": {"first_frame": "given", "decode": "relative", "cascade": "sample"}},
        cascade={"steps": 3, "data_uri": other, "batch_size": 1, "channels": [8, 16],
                 "warmup_steps": 0, "gate": True})
    added = _demo_model("cascade", "--config", str(gated), "--run", str(tmp_path / "gated"),
                        "--model", str(tmp_path / "model"))
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout.splitlines()[-1])["transformer_step"] == 2
    assert sorted(p.name for p in (tmp_path / "gated" / ROLLOUTS_FOLDER).iterdir()) == [
        "ep000.npz", "ep001.npz"]
    loaded = load_model(tmp_path / "model" / "weights")  # the manifest's hashes hold
    assert loaded.cascade is not None and loaded.cascade.config.gate
    assert loaded.info.extra["cascade"] == "sample"
    committed = load_run_cascade(RunDir(str(tmp_path / "gated")))
    assert torch.equal(loaded.cascade.head.weight, committed.head.weight)
    for name, value in loaded.transformer.state_dict().items():  # the transformer is kept
        assert torch.equal(value, before[name]), name
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    assert manifest["training"]["cascade_steps"] == 3
    assert manifest["fidelity"]["cascade"] == "sample"
