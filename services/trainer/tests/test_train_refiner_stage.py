"""The refiner stage (k4d_trainer.refiner_stage): its loss, its training, its resumable state (a
stage stopped partway continues from its newest checkpoint to the same weights), and its
committed refiner, which a resumed run loads instead of training again."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from k4d.episodes import open_dataset
from k4d.errors import InvalidArgument
from k4d_model.refiner import CAMERA_CHANNELS, DEPTH_GAIN, INPUT_CHANNELS, BaseRays, depth_scale
from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.config import RefinerSection
from k4d_trainer.parallel import DistInfo
from k4d_trainer.refiner_stage import (
    COORDINATE_GAIN,
    NETWORKS,
    STAGE_FOLDER,
    FirstFrameClip,
    RefinerClip,
    RefinerExample,
    load_run_refiner,
    network_dtype,
    planes_of,
    refiner_config,
    refiner_episodes,
    refiner_loss,
    refiner_stage,
    train_refiner,
)
from k4d_trainer.runs import RunDir

CLIP = ClipSpec(num_frames=5, height=32, width=48)
SECTION = RefinerSection(steps=6, batch_size=2, lr=2e-3, warmup_steps=2, channels=[8, 16],
                         checkpoint_every=2, log_every=1)


class Stop(Exception):
    pass


def _train(dataset, section=SECTION, run=None, stop_at=None):
    def log(line: str) -> None:
        if stop_at is not None and line.startswith(f"refiner step {stop_at}/"):
            raise Stop(line)

    ids = sorted(dataset.episode_ids)
    return train_refiner(dataset, ids, CLIP, section, DistInfo(), seed=3, run=run, log=log)


def _batch(delta=0.0, changed=(1.0, 0.0, 0.0, 0.0), off_robot=(1.0, 1.0, 1.0, 0.0),
           depth=0.0, known=(1.0,) * 4, first_depth=0.0, first_known=(1.0,) * 4):
    """A 1 x 2 x 2 RefinerExample batch; tuples are the 4 pixels row by row."""
    def plane(v, channels=1):
        t = torch.tensor(v, dtype=torch.float32).reshape(1, 1, 2, 2) if isinstance(v, tuple) \
            else torch.full((1, 1, 2, 2), float(v))
        return t.repeat(1, channels, 1, 1)

    return RefinerExample(torch.zeros(1, 13, 2, 2), plane(delta, 3), plane(changed),
                          plane(off_robot), plane(depth), plane(known), plane(first_depth),
                          plane(first_known), torch.zeros(1, 1, 2, 2, dtype=torch.int64),
                          plane(0.0, 3), plane(0.0))


def test_loss_weights_the_changed_pixels_and_leaves_the_robot_out():
    output = torch.zeros(1, 4, 2, 2)
    batch = _batch(delta=1.0)
    section = RefinerSection(changed_weight=10.0, mask_weight=0.0)
    loss, parts = refiner_loss(output, batch, section)
    # every off-robot pixel is off by 1: the weighted mean is 1, whatever the weights
    assert parts["colour"] == pytest.approx(1.0)
    output[:, :3, 0, 0] = 1.0  # the changed pixel right: its weight 11 of 13 leaves
    _, parts = refiner_loss(output, batch, section)
    assert parts["colour"] == pytest.approx(2.0 / 13.0)
    output[:, :3, 1, 1] = 5.0  # the robot's pixel does not count
    _, same = refiner_loss(output, batch, section)
    assert same["colour"] == pytest.approx(parts["colour"])
    assert float(loss) == pytest.approx(1.0)


def test_examples_are_the_change_from_frame_zero(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=1, frames=5, height=32, width=48))
    clip = read_clip(dataset.open(sorted(dataset.episode_ids)[0]), CLIP)
    x, delta, changed, off_robot, depth, known, first, first_known, *planes = (
        RefinerClip(clip).example(3))
    assert not planes[2].any()  # no camera pose: no plane targets
    assert x.shape == (13, 32, 48)
    rgb = clip["rgb"].astype(np.float32) / 127.5
    assert np.allclose(delta.numpy(), (rgb[3] - rgb[0]).transpose(2, 0, 1))
    robot = clip["robot_mask"]
    assert np.array_equal(off_robot[0].numpy() > 0, ~robot[3] & ~robot[0])
    assert not (changed[0].numpy() > 0)[robot[3] | robot[0]].any()
    z = clip["pointmap"][..., 2]
    assert np.array_equal(known[0].numpy() > 0, (z[3] > 0) & (z[0] > 0))
    unit = depth_scale(RefinerClip(clip).robot) / DEPTH_GAIN  # the depth head's unit
    where = known[0].numpy() > 0
    assert np.allclose(depth[0].numpy()[where], ((z[3] - z[0]) / unit)[where], atol=1e-4)
    scale = depth_scale(RefinerClip(clip).robot)
    where = first_known[0].numpy() > 0
    assert np.array_equal(where, z[0] > 0)
    assert np.allclose(first[0].numpy()[where], np.log(z[0][where] / scale), atol=1e-5)


def test_depth_losses_count_the_pixels_with_known_depth():
    output = torch.zeros(1, 6, 2, 2)
    batch = _batch(changed=(1.0, 1.0, 0.0, 1.0), known=(1.0, 0.0, 1.0, 1.0), depth=2.0,
                   first_depth=0.5, first_known=(1.0, 1.0, 0.0, 1.0))
    section = RefinerSection(mask_weight=0.0, depth_weight=3.0, first_depth_weight=2.0)
    loss, parts = refiner_loss(output, batch, section)
    assert parts["depth"] == pytest.approx(4.0)  # only pixel (0, 0): changed, known, off robot
    assert parts["first_depth"] == pytest.approx(0.25)  # robot pixels too: the whole frame
    assert float(loss) == pytest.approx(12.0 + 0.5)
    output[:, 4, 0, 0] = 2.0
    output[:, 5] = 0.5
    _, parts = refiner_loss(output, batch, section)
    assert parts["depth"] == 0.0 and parts["first_depth"] == 0.0


def test_depth_weights_train_depth_heads(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    section = RefinerSection(steps=2, batch_size=2, channels=[8, 16], depth_weight=1.0,
                             first_depth_weight=1.0)
    refiner, losses = _train(dataset, section)
    assert refiner.config.depth and refiner.config.first_depth
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_refiner_data_uri_takes_the_runs_episodes_from_another_dataset(tmp_path,
                                                                       make_dataset):
    other = open_dataset(make_dataset(tmp_path / "other", count=3, frames=5, height=32,
                                      width=48))
    ids = sorted(other.episode_ids)
    _, picked = refiner_episodes(str(tmp_path / "other"), [ids[2], "elsewhere", ids[0]])
    assert picked == [ids[2], ids[0]]
    with pytest.raises(InvalidArgument, match="refiner.data_uri"):
        refiner_episodes(str(tmp_path / "other"), ["elsewhere"])


def test_refiner_stage_trains_and_resumes_to_the_same_weights(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    straight, straight_losses = _train(dataset)
    assert len(straight_losses) == SECTION.steps and all(np.isfinite(straight_losses))

    run = RunDir(str(tmp_path / "run"))
    with pytest.raises(Stop):
        _train(dataset, run=run, stop_at=5)  # saved at 4
    assert run.exists(f"{STAGE_FOLDER}/latest.json")
    resumed, resumed_losses = _train(dataset, run=run)
    assert resumed_losses == straight_losses
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_a_resumed_run_loads_the_committed_refiner(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    run = RunDir(str(tmp_path / "run"))
    ids = sorted(dataset.episode_ids)

    class Components:
        refiner = None

    first = Components()
    before = torch.random.get_rng_state()
    assert len(refiner_stage(first, dataset, ids, CLIP, SECTION, DistInfo(), run, 3,
                             log=lambda _: None)) == SECTION.steps
    assert torch.equal(torch.random.get_rng_state(), before)  # the run's stream untouched
    assert not run.exists(f"{STAGE_FOLDER}/latest.json")  # superseded by the committed one
    again = Components()
    lines = []
    assert refiner_stage(again, dataset, ids, CLIP, SECTION, DistInfo(), run, 3,
                         log=lines.append) == []
    assert lines == ["refiner: loaded the committed refiner of this run"]
    for (name, a), (_, b) in zip(first.refiner.state_dict().items(),
                                 again.refiner.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert load_run_refiner(RunDir(str(tmp_path / "elsewhere"))) is None


@pytest.mark.parametrize("field,value", [("steps", -1), ("batch_size", 0), ("lr", 0.0),
                                         ("lr_schedule", "step"), ("changed_weight", -1.0),
                                         ("depth_weight", -1.0),
                                         ("first_depth_weight", float("nan")),
                                         ("plane_weight", -1.0), ("camera_dropout", 1.0),
                                         ("channels", [12, 24]), ("channels", []),
                                         ("precision", "fp16"), ("precision", "auto")])
def test_refiner_section_is_checked(field, value):
    with pytest.raises(InvalidArgument, match=f"refiner.{field}"):
        RefinerSection(**{field: value}).validate()


GEOMETRY = RefinerSection(steps=4, batch_size=2, lr=2e-3, warmup_steps=1, channels=[8, 16],
                          colour_weight=0.0, depth_weight=1.0, first_depth_weight=1.0,
                          checkpoint_every=2, log_every=1)


def _with_geometry_stage(dataset, run, log):
    class Components:
        refiner = None

    components = Components()
    section = RefinerSection(**{**SECTION.__dict__, "geometry": GEOMETRY})
    losses = refiner_stage(components, dataset, sorted(dataset.episode_ids), CLIP, section,
                           DistInfo(), run, 3, log=log)
    return components.refiner, losses


def test_a_network_trained_alone_by_its_table_entry_is_the_stages_own(tmp_path, make_dataset):
    # What training one network alone relies on: NETWORKS gives each network's
    # seed and stage folder as the stage itself uses them.
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    staged, _ = _with_geometry_stage(dataset, RunDir(str(tmp_path / "a")), lambda _: None)
    network = NETWORKS["geometry"]
    alone, _ = train_refiner(dataset, sorted(dataset.episode_ids), CLIP, GEOMETRY, DistInfo(),
                             seed=3 + network.seed_offset, log=lambda _: None, network=network)
    for name, value in alone.state_dict().items():
        assert torch.equal(value, staged.geometry.state_dict()[name]), name


def test_a_geometry_network_is_trained_after_the_refiner_and_stored_inside_it(tmp_path,
                                                                             make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    straight, losses = _with_geometry_stage(dataset, RunDir(str(tmp_path / "a")), lambda _: None)
    assert len(losses) == SECTION.steps + GEOMETRY.steps
    assert straight.geometry is not None and straight.geometry.config.first_depth
    assert not straight.config.depth  # the colour network has no depth heads

    def stop_in_geometry(line: str) -> None:
        lines.append(line)
        if line.startswith("geometry refiner step 3/"):
            raise Stop(line)

    lines: list[str] = []
    run = RunDir(str(tmp_path / "b"))
    with pytest.raises(Stop):
        _with_geometry_stage(dataset, run, stop_in_geometry)
    lines.clear()
    resumed, _ = _with_geometry_stage(dataset, run, lines.append)
    # the finished colour network is loaded from its final stage state, not trained again
    assert "refiner stage: resumed at step 6" in lines
    assert not any(line.startswith("refiner step") for line in lines)
    assert "geometry refiner stage: resumed at step 2" in lines
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert not run.exists(f"{STAGE_FOLDER}/latest.json")


def test_a_geometry_section_is_checked_with_its_own_names():
    with pytest.raises(InvalidArgument, match="refiner.geometry.depth_weight"):
        RefinerSection(geometry=RefinerSection(depth_weight=-1.0)).validate()
    with pytest.raises(InvalidArgument, match="refiner.geometry.precision"):
        RefinerSection(geometry=RefinerSection(precision="half")).validate()
    with pytest.raises(InvalidArgument, match="refiner.geometry.geometry"):
        RefinerSection(geometry=RefinerSection(geometry=RefinerSection())).validate()


def test_planes_of_names_the_axis_whose_coordinate_is_flat():
    v, u = np.mgrid[0:6, 0:8].astype(np.float64)
    points = np.zeros((6, 8, 3))
    points[:, :4] = np.stack([0.1 * u, 0.1 * v, np.zeros_like(u)], -1)[:, :4]       # z = 0
    points[:, 4:] = np.stack([np.full_like(u, 2.0), 0.1 * u, 0.1 * v], -1)[:, 4:]  # x = 2
    known = np.ones((6, 8), bool)
    known[0, 0] = False
    plane = planes_of(points, known)
    assert (plane[2:5, 1:3] == 3).all() and plane[1, 2] == 3 and (plane[1:5, 5:7] == 1).all()
    assert (plane[:, 3:5] == 0).all()  # their neighbourhoods span both planes
    assert plane[0, 0] == 0 and plane[1, 1] == 0  # unknown, or next to an unknown pixel
    assert (plane[0] == 0).all() and (plane[:, -1] == 0).all()  # the border: 3x3 incomplete


def test_plane_loss_is_the_plane_cross_entropy_and_the_coordinate_error():
    batch = _batch(first_known=(1.0,) * 4)
    batch = batch._replace(plane=torch.tensor([[[[3, 1], [0, 3]]]]),
                           base_points=torch.tensor([0.0, 0.0, 0.5]).reshape(1, 3, 1, 1)
                           .repeat(1, 1, 2, 2),
                           plane_known=torch.tensor([[[[1.0, 1.0], [1.0, 0.0]]]]))
    section = RefinerSection(mask_weight=0.0, colour_weight=0.0, first_depth_weight=1.0,
                             plane_weight=2.0)
    output = torch.zeros(1, 4 + 1 + 7, 2, 2)
    output[:, 5:8] = batch.base_points  # the right coordinates ...
    output[:, 8:] = torch.tensor([0.0, 0.0, 0.0, 0.0]).reshape(1, 4, 1, 1)  # ... no preference
    loss, parts = refiner_loss(output, batch, section)
    assert parts["planes"] == pytest.approx(np.log(4.0), rel=1e-5)
    assert parts["coordinate_m"] == 0.0
    assert float(loss) == pytest.approx(2.0 * np.log(4.0), rel=1e-5)
    sure = torch.full((1, 4, 2, 2), -20.0)
    sure[0, 3, 0, 0] = sure[0, 1, 0, 1] = sure[0, 0, 1, 0] = 20.0
    sure[0, 0, 1, 1] = 20.0  # wrong, but its target is not known
    output[:, 8:] = sure
    output[0, 7, 0, 0] = 0.6  # the z plane's coordinate 0.1 m off at a z pixel
    output[0, 5, 1, 0] = 9.0  # x off at a pixel on no plane: not counted
    _, parts = refiner_loss(output, batch, section)
    assert parts["planes"] == pytest.approx(0.0, abs=1e-6)
    assert parts["coordinate_m"] == pytest.approx(0.1 / 2, rel=1e-5)  # 2 pixels on planes
    assert COORDINATE_GAIN == 10.0


def test_examples_carry_the_camera_and_the_plane_targets(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=1, frames=5, height=32, width=48))
    episode = dataset.open(sorted(dataset.episode_ids)[0])
    clip = read_clip(episode, CLIP)
    pose = episode.meta.camera_at(0).T_cam_from_base
    refiner_clip = RefinerClip(clip, pose)
    example = refiner_clip.example(3, True)
    assert example.x.shape == (INPUT_CHANNELS + CAMERA_CHANNELS, 32, 48)
    rays = BaseRays.from_robot(refiner_clip.robot, pose)
    assert np.allclose(example.x[INPUT_CHANNELS:].numpy(), rays.channels())
    known = example.plane_known[0].numpy() > 0
    robot = clip["robot_mask"][0]
    assert known.any() and not known[robot].any()
    base = example.base_points.numpy().transpose(1, 2, 0)[known]
    back = (np.c_[base, np.ones(len(base))] @ pose.T)[:, :3]
    assert np.allclose(back, clip["pointmap"][0][known], atol=1e-5)
    blind = refiner_clip.example(3, False)  # camera dropped: zero inputs, no plane targets
    assert not blind.x[INPUT_CHANNELS:].any() and not blind.plane_known.any()
    assert refiner_clip.example(3).x.shape[0] == INPUT_CHANNELS  # a network without planes


def test_plane_weight_trains_scene_planes(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    section = RefinerSection(steps=2, batch_size=2, channels=[8, 16], first_depth_weight=1.0,
                             plane_weight=1.0, camera_dropout=0.5)
    refiner, losses = _train(dataset, section)
    assert refiner.config.scene_planes and refiner.config.first_depth
    assert len(losses) == 2 and all(np.isfinite(losses))
    with pytest.raises(InvalidArgument, match="refiner.plane_weight"):
        RefinerSection(plane_weight=1.0).validate()  # no first-frame depth head


def test_object_weight_weighs_the_object_pixels_in_the_depth_and_plane_terms():
    batch = _batch(first_depth=0.0, first_known=(1.0,) * 4)
    batch = batch._replace(plane=torch.tensor([[[[3, 3], [3, 3]]]]),
                           plane_known=torch.ones(1, 1, 2, 2),
                           objects=torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]]))
    output = torch.zeros(1, 4 + 1 + 7, 2, 2)
    output[0, 4, 0, 0] = 1.0  # the object's depth off by 1, the others right
    output[0, 7, 0, 0] = 0.1  # and its z coordinate off by 0.1 m
    plain = RefinerSection(mask_weight=0.0, colour_weight=0.0, first_depth_weight=1.0,
                           plane_weight=1.0)
    _, parts = refiner_loss(output, batch, plain)
    assert parts["first_depth"] == pytest.approx(1.0 / 4)
    assert parts["coordinate_m"] == pytest.approx(0.1 / 4)
    weighted = RefinerSection(**{**plain.__dict__, "object_weight": 5.0})
    _, parts = refiner_loss(output, batch, weighted)
    assert parts["first_depth"] == pytest.approx(6.0 / 9)  # the object weighs 1 + 5 of 9
    assert parts["coordinate_m"] == pytest.approx(0.6 / 9)
    _, same = refiner_loss(output, batch._replace(objects=None), weighted)
    assert same["first_depth"] == pytest.approx(1.0 / 4)  # no object mask: unweighted


def _with_object_ids(root, make_dataset):
    """make_dataset's episodes with a 4x6-pixel object (id 2) in every frame."""
    from k4d.episodes import DatasetWriter

    source = open_dataset(make_dataset(root / "plain", count=2, frames=5, height=32, width=48))
    writer = DatasetWriter(str(root / "ids"))
    for eid in sorted(source.episode_ids):
        episode = source.open(eid)
        arrays = {name: np.asarray(episode[name]) for name in episode.arrays}
        ids = np.zeros(arrays["rgb"].shape[:3], np.int16)
        ids[:, 10:14, 20:26] = 2
        writer.write_episode(episode.meta, {**arrays, "object_ids": ids})
    writer.close()
    return source, open_dataset(str(root / "ids"))


def test_object_weight_reads_the_episodes_object_ids(tmp_path, make_dataset):
    plain, with_ids = _with_object_ids(tmp_path, make_dataset)
    clip = read_clip(with_ids.open(sorted(with_ids.episode_ids)[0]), CLIP, ("object_ids",))
    assert clip["object_ids"].dtype == np.int16 and clip["object_ids"].shape == (5, 32, 48)
    example = RefinerClip(clip).example(2)
    expected = (clip["object_ids"][0] > 0) & ~clip["robot_mask"][0]
    assert expected.any() and np.array_equal(example.objects[0].numpy() > 0, expected)
    assert not RefinerClip(read_clip(plain.open(sorted(plain.episode_ids)[0]), CLIP)
                           ).example(2).objects.any()
    section = RefinerSection(steps=2, batch_size=2, channels=[8, 16], first_depth_weight=1.0,
                             object_weight=10.0)
    refiner, losses = _train(with_ids, section)
    assert len(losses) == 2 and all(np.isfinite(losses))
    with pytest.raises(InvalidArgument, match="refiner.object_weight") as exc:
        _train(plain, section)  # the episodes hold no object ids to weigh by
    assert "object_ids" in str(exc.value)


@pytest.mark.parametrize("section", [RefinerSection(object_weight=-1.0),
                                     RefinerSection(object_weight=float("nan")),
                                     RefinerSection(object_weight=5.0)])  # no depth terms
def test_object_weight_is_checked(section):
    with pytest.raises(InvalidArgument, match="refiner.object_weight"):
        section.validate()


def test_object_planes_label_the_objects_on_the_plane_of_their_own_height(tmp_path,
                                                                          make_dataset):
    plain, with_ids = _with_object_ids(tmp_path, make_dataset)
    episode = with_ids.open(sorted(with_ids.episode_ids)[0])
    clip = read_clip(episode, CLIP, ("object_ids",))
    pose = episode.meta.camera_at(0).T_cam_from_base
    labelled = RefinerClip(clip, pose, object_planes=True)
    objects = labelled.objects & labelled.plane_known
    assert objects.any() and (labelled.plane[objects] == 3).all()
    unlabelled = RefinerClip(clip, pose)
    assert np.array_equal(labelled.plane[~objects], unlabelled.plane[~objects])
    # the z coordinate's target there is the point's own height
    example = labelled.example(2, True)
    assert np.allclose(example.base_points[2].numpy()[objects],
                       labelled.base_points[..., 2][objects])
    section = RefinerSection(steps=2, batch_size=2, channels=[8, 16], first_depth_weight=1.0,
                             plane_weight=1.0, object_planes=True)
    refiner, losses = _train(with_ids, section)
    assert refiner.config.scene_planes and all(np.isfinite(losses))
    with pytest.raises(InvalidArgument, match="refiner.object_planes"):
        _train(plain, section)
    with pytest.raises(InvalidArgument, match="refiner.object_planes"):
        RefinerSection(first_depth_weight=1.0, object_planes=True).validate()  # no planes


def test_bf16_autocast_trains_an_fp32_network_on_an_fp32_loss(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    ids = sorted(dataset.episode_ids)
    fp32, fp32_losses = _train(dataset)
    bf16, bf16_losses = train_refiner(dataset, ids, CLIP, SECTION, DistInfo(), seed=3, log=str,
                                      compute_dtype=torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in bf16.parameters())
    assert bf16_losses != fp32_losses  # the forward ran in bf16
    assert np.allclose(bf16_losses, fp32_losses, rtol=0.05)


def test_a_networks_own_precision_overrides_the_models(tmp_path, make_dataset):
    """A bf16 recipe whose geometry section says fp32 trains that network exactly as an fp32
    recipe does, and the colour network still in bf16 (issue 21, round 20)."""
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=2, frames=5, height=32, width=48))
    ids = sorted(dataset.episode_ids)

    def stage(run_name, geometry, dtype):
        class Components:
            refiner = None

        components = Components()
        section = RefinerSection(**{**SECTION.__dict__, "geometry": geometry})
        losses = refiner_stage(components, dataset, ids, CLIP, section, DistInfo(),
                               RunDir(str(tmp_path / run_name)), 3, log=str,
                               compute_dtype=dtype)
        return components.refiner, losses

    fp32, fp32_losses = stage("fp32", GEOMETRY, None)
    mixed, mixed_losses = stage("mixed", RefinerSection(**{**GEOMETRY.__dict__,
                                                           "precision": "fp32"}),
                                torch.bfloat16)
    bf16, bf16_losses = stage("bf16", GEOMETRY, torch.bfloat16)
    colour = SECTION.steps
    assert mixed_losses[colour:] != bf16_losses[colour:]
    assert mixed_losses[:colour] == bf16_losses[:colour]  # the colour network: the model's bf16
    assert mixed_losses[:colour] != fp32_losses[:colour]
    # the geometry network has its own seed: in fp32 it trains to the same weights whatever
    # the model's precision
    for (name, a), (_, b) in zip(fp32.geometry.state_dict().items(),
                                 mixed.geometry.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert not all(torch.equal(a, b) for a, b in zip(bf16.geometry.state_dict().values(),
                                                     mixed.geometry.state_dict().values(),
                                                     strict=True))
    assert network_dtype(RefinerSection(precision="bf16"), None) == torch.bfloat16
    assert network_dtype(RefinerSection(), torch.bfloat16) == torch.bfloat16


def test_object_logit_loss_is_the_weighted_bce_off_the_robot():
    batch = _batch(off_robot=(1.0, 1.0, 1.0, 0.0))._replace(
        objects=torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]]))
    section = RefinerSection(colour_weight=0.0, mask_weight=0.0, object_logit_weight=2.0,
                             object_pos_weight=3.0)
    output = torch.zeros(1, 4 + 1, 2, 2)  # colour (3), change logit, object logit
    output[0, 4] = torch.tensor([[1.0, -1.0], [0.0, 5.0]])
    loss, parts = refiner_loss(output, batch, section)
    sp = torch.nn.functional.softplus
    # object pixel (weighted 3), two others; the fourth pixel is the robot's and left out
    expected = (3.0 * sp(torch.tensor(-1.0)) + sp(torch.tensor(-1.0)) + sp(torch.tensor(0.0))) / 3
    assert parts["objects"] == pytest.approx(float(expected), rel=1e-5)
    assert float(loss) == pytest.approx(2.0 * float(expected), rel=1e-5)


OBJECTS = RefinerSection(steps=3, batch_size=2, lr=2e-3, warmup_steps=1, channels=[8, 16],
                         colour_weight=0.0, mask_weight=0.0, object_logit_weight=1.0,
                         checkpoint_every=2, log_every=1)


def test_an_object_network_is_trained_after_the_others_and_added_to_a_committed_refiner(
        tmp_path, make_dataset):
    plain, with_ids = _with_object_ids(tmp_path, make_dataset)
    ids = sorted(with_ids.episode_ids)

    class Components:
        refiner = None

    # a run whose refiner was committed before its recipe had an object network
    run = RunDir(str(tmp_path / "run"))
    before = Components()
    refiner_stage(before, with_ids, ids, CLIP, SECTION, DistInfo(), run, 3, log=lambda _: None)
    assert before.refiner.objects is None
    section = RefinerSection(**{**SECTION.__dict__, "objects": OBJECTS})
    lines: list[str] = []
    after = Components()
    losses = refiner_stage(after, with_ids, ids, CLIP, section, DistInfo(), run, 3,
                           log=lines.append)
    assert len(losses) == OBJECTS.steps and not any(line.startswith("refiner step")
                                                    for line in lines)
    objects = after.refiner.objects
    assert objects is not None and objects.config.object_logit
    assert objects.config.object_index == 4 and objects.config.outputs == 5
    for name, value in before.refiner.state_dict().items():  # the other networks kept
        assert torch.equal(value, after.refiner.state_dict()[name]), name
    again = Components()
    assert refiner_stage(again, with_ids, ids, CLIP, section, DistInfo(), run, 3,
                         log=lambda _: None) == []  # committed with it: loaded
    assert again.refiner.objects is not None
    # a fresh run trains the three in turn; the object network as the one added above
    fresh = Components()
    losses = refiner_stage(fresh, with_ids, ids, CLIP, section, DistInfo(),
                           RunDir(str(tmp_path / "fresh")), 3, log=lambda _: None)
    assert len(losses) == SECTION.steps + OBJECTS.steps
    for name, value in after.refiner.state_dict().items():
        assert torch.equal(value, fresh.refiner.state_dict()[name]), name
    with pytest.raises(InvalidArgument, match="refiner.objects.object_logit_weight") as exc:
        refiner_stage(Components(), plain, sorted(plain.episode_ids), CLIP, section, DistInfo(),
                      RunDir(str(tmp_path / "plain")), 3, log=lambda _: None)
    assert "object_ids" in str(exc.value)


@pytest.mark.parametrize("section, name", [
    (RefinerSection(objects=RefinerSection()), "refiner.objects.object_logit_weight"),
    (RefinerSection(objects=RefinerSection(object_logit_weight=1.0,
                                           geometry=RefinerSection())), "refiner.objects"),
    (RefinerSection(objects=RefinerSection(object_logit_weight=1.0, object_pos_weight=-1.0)),
     "refiner.objects.object_pos_weight"),
    (RefinerSection(object_logit_weight=-1.0), "refiner.object_logit_weight"),
    (RefinerSection(objects=RefinerSection(object_logit_weight=1.0)),  # a colour term too
     "refiner.objects.colour_weight")])
def test_an_object_section_is_checked_with_its_own_names(section, name):
    with pytest.raises(InvalidArgument, match=name):
        section.validate()


def test_an_object_network_learns_from_every_frame_as_a_given_image(tmp_path, make_dataset):
    from k4d_model.refiner import refiner_inputs
    from k4d_model.results import RobotCondition

    _, with_ids = _with_object_ids(tmp_path, make_dataset)
    clip = read_clip(with_ids.open(sorted(with_ids.episode_ids)[0]), CLIP, ("object_ids",))
    refiner_clip = RefinerClip(clip)
    mask = clip["robot_mask"].astype(bool)
    for t in (0, 3):
        example = refiner_clip.given_example(t)
        robot = RobotCondition(clip["robot_rgb"][t:t + 1],
                               clip["robot_pointmap"][t:t + 1].astype(np.float32), mask[t:t + 1])
        assert torch.equal(example.x, refiner_inputs(clip["rgb"][t], robot, [0])[0])
        expected = (clip["object_ids"][t] > 0) & ~mask[t]
        assert expected.any() and np.array_equal(example.objects[0].numpy() > 0, expected)
        assert np.array_equal(example.off_robot[0].numpy() > 0, ~mask[t])
        assert not example.changed.any() and not example.first_known.any()


FIRST_DEPTH_ALONE = dict(colour_weight=0.0, mask_weight=0.0, first_depth_weight=1.0)


def test_a_first_depth_network_learns_from_every_frame_as_the_given_frame_zero(
        tmp_path, make_dataset):
    from k4d_model.refiner import refiner_inputs
    from k4d_model.results import RobotCondition

    _, with_ids = _with_object_ids(tmp_path, make_dataset)
    clip = read_clip(with_ids.open(sorted(with_ids.episode_ids)[0]), CLIP, ("object_ids",))
    refiner_clip = RefinerClip(clip)
    mask = clip["robot_mask"].astype(bool)
    z = clip["pointmap"][..., 2]
    example = refiner_clip.first_depth_example(2, 4)
    robot = RobotCondition(clip["robot_rgb"][2:], clip["robot_pointmap"][2:].astype(np.float32),
                           mask[2:])
    # the image is frame 2's, the robot's rollout starts there: frame 4 is its frame 2 of 3
    assert torch.equal(example.x, refiner_inputs(clip["rgb"][2], robot, [2])[0])
    scale = depth_scale(robot)
    assert scale != pytest.approx(depth_scale(refiner_clip.robot))  # frame 2's robot, not 0's
    where = example.first_known[0].numpy() > 0
    assert np.array_equal(where, z[2] > 0)
    assert np.allclose(example.first_depth[0].numpy()[where], np.log(z[2][where] / scale),
                       atol=1e-5)
    assert np.array_equal(example.objects[0].numpy() > 0, (clip["object_ids"][2] > 0) & ~mask[2])
    assert np.array_equal(example.off_robot[0].numpy() > 0, ~mask[4] & ~mask[2])
    assert not example.delta.any() and not example.changed.any() and not example.known.any()
    # frame 0 as the start is the default example's first-depth input and target
    default = refiner_clip.example(3)
    start0 = refiner_clip.first_depth_example(0, 3)
    assert torch.equal(start0.x, default.x) and torch.equal(start0.first_depth, default.first_depth)

    section = RefinerSection(steps=3, batch_size=4, channels=[8, 16], object_weight=5.0,
                             first_depth_frames="every", **FIRST_DEPTH_ALONE)
    refiner, losses = _train(with_ids, section)
    assert refiner.config.first_depth and len(losses) == 3 and all(np.isfinite(losses))


def test_a_first_depth_network_on_frame_zero_keeps_a_third_of_each_episode(
        tmp_path, make_dataset):
    _, with_ids = _with_object_ids(tmp_path, make_dataset)
    clip = read_clip(with_ids.open(sorted(with_ids.episode_ids)[0]), CLIP, ("object_ids",))
    full, lean = RefinerClip(clip), FirstFrameClip(clip)
    section = RefinerSection(object_weight=5.0, **FIRST_DEPTH_ALONE)
    assert section.first_frame_only and lean.frames == full.frames
    assert not RefinerSection(first_depth_frames="every", **FIRST_DEPTH_ALONE).first_frame_only
    assert not RefinerSection(first_depth_weight=1.0).first_frame_only  # a colour term too
    # its own arrays, not views that would hold the whole clip's alive
    assert all(a.base is None for a in vars(lean).values())
    held = sum(a.nbytes for a in vars(lean).values())
    assert held < sum(a.nbytes for a in (full.rgb, full.robot.rgb, full.robot.pointmap,
                                         full.robot.mask, full.changed, full.depth,
                                         full.object_frames)) / 2.5
    output = torch.randn(1, refiner_config(section).outputs, CLIP.height, CLIP.width)
    for t in range(1, full.frames):
        kept, whole = lean.first_depth_example(0, t), full.example(t)
        for name in ("x", "off_robot", "first_depth", "first_known", "objects"):
            assert torch.equal(getattr(kept, name), getattr(whole, name)), name
        stack = [RefinerExample(*(part[None] for part in e)) for e in (kept, whole)]
        # the same loss: the terms it drops weigh 0 in such a section, and are not reported
        (loss, parts), (same, _) = (refiner_loss(output, b, section) for b in stack)
        assert loss == same and set(parts) == {"first_depth"}
    with pytest.raises(ValueError, match="frame 0 alone"):
        lean.first_depth_example(1, 2)
    refiner, losses = _train(with_ids, RefinerSection(steps=2, batch_size=2, channels=[8, 16],
                                                      object_weight=5.0, **FIRST_DEPTH_ALONE))
    assert refiner.config.first_depth and all(np.isfinite(losses))


@pytest.mark.parametrize("section,name", [
    (RefinerSection(first_depth_frames="all", **FIRST_DEPTH_ALONE), "refiner.first_depth_frames"),
    (RefinerSection(first_depth_frames="every"), "refiner.first_depth_weight"),  # no head
    (RefinerSection(first_depth_frames="every", first_depth_weight=1.0, mask_weight=0.0),
     "refiner.colour_weight"),  # a colour term: its targets would be frame 0's change
    (RefinerSection(first_depth_frames="every", depth_weight=1.0, **FIRST_DEPTH_ALONE),
     "refiner.depth_weight"),
    (RefinerSection(geometry=RefinerSection(first_depth_frames="every", first_depth_weight=1.0)),
     "refiner.geometry.colour_weight")])
def test_first_depth_frames_is_checked(section, name):
    with pytest.raises(InvalidArgument, match=name):
        section.validate()


def test_zoomed_examples_are_a_window_of_each_resized_to_the_frame():
    from k4d_trainer.refiner_stage import IMAGE_CHANNELS, zoomed

    N, H, W = 3, 12, 18
    rows = torch.arange(H, dtype=torch.float32)[:, None].expand(H, W)
    cols = torch.arange(W, dtype=torch.float32)[None, :].expand(H, W)
    x = torch.stack([rows] * IMAGE_CHANNELS + [cols] * 7)[None].repeat(N, 1, 1, 1)
    mask = (cols >= 9).float()[None, None].repeat(N, 1, 1, 1)
    plane = (rows.long() % 4)[None, None].repeat(N, 1, 1, 1)
    batch = RefinerExample(x, mask.repeat(1, 3, 1, 1), mask, mask, mask, mask, cols[None, None]
                           .repeat(N, 1, 1, 1), mask, plane, mask.repeat(1, 3, 1, 1), mask, mask)
    same = zoomed(batch, 1.0, torch.Generator().manual_seed(0))
    for a, b in zip(same, batch, strict=True):
        assert torch.equal(a, b)  # z = 1: the whole frame, unchanged
    out = zoomed(batch, 2.0, torch.Generator().manual_seed(0))
    assert all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(out, batch, strict=True))
    assert set(out.changed.unique().tolist()) <= {0.0, 1.0}  # masks stay masks
    assert set(out.plane.unique().tolist()) <= {0, 1, 2, 3}
    for n in range(N):
        seen = out.first_depth[n, 0]  # the column index, nearest: a window of columns
        columns = seen[0].unique()
        assert torch.equal(columns, torch.arange(columns[0], columns[-1] + 1))
        assert len(columns) < W  # narrower than the frame
        assert torch.equal(out.x[n, IMAGE_CHANNELS], seen)  # every part the same window
        assert out.x[n, :IMAGE_CHANNELS].max() - out.x[n, :IMAGE_CHANNELS].min() < H - 1


def test_max_zoom_trains_and_is_checked(tmp_path, make_dataset):
    _, with_ids = _with_object_ids(tmp_path, make_dataset)
    section = RefinerSection(steps=2, batch_size=2, channels=[8, 16], object_weight=5.0,
                             max_zoom=1.5, **FIRST_DEPTH_ALONE)
    refiner, losses = _train(with_ids, section)
    assert len(losses) == 2 and all(np.isfinite(losses))
    for bad in (RefinerSection(max_zoom=0.5), RefinerSection(max_zoom=float("inf")),
                RefinerSection(max_zoom=1.5, plane_weight=1.0, first_depth_weight=1.0)):
        with pytest.raises(InvalidArgument, match="refiner.max_zoom"):
            bad.validate()


def test_max_episodes_trains_on_more_episodes_than_the_run_has(tmp_path, make_dataset):
    dataset = open_dataset(make_dataset(tmp_path / "ds", count=3, frames=5, height=32, width=48))
    ids = sorted(dataset.episode_ids)

    class Components:
        refiner = None

    def stage(section, run):
        lines = []
        refiner_stage(Components(), dataset, ids[:1], CLIP, section, DistInfo(), run, 3,
                      log=lines.append)
        return lines

    section = RefinerSection(**{**SECTION.__dict__, "max_episodes": 3, "checkpoint_every": 0})
    lines = stage(section, RunDir(str(tmp_path / "a")))
    assert "refiner: the first 3 episodes of the run dataset" in lines
    # the same weights as training on the three episodes directly
    alone, _ = train_refiner(dataset, ids, CLIP, SECTION, DistInfo(), seed=3,
                             log=lambda _: None)
    staged = load_run_refiner(RunDir(str(tmp_path / "a")))
    for name, value in alone.state_dict().items():
        assert torch.equal(value, staged.state_dict()[name]), name
    too_many = RefinerSection(**{**SECTION.__dict__, "max_episodes": 4})
    with pytest.raises(InvalidArgument, match="refiner.max_episodes") as exc:
        stage(too_many, RunDir(str(tmp_path / "b")))
    assert "holds 3 complete episodes, fewer than 4" in str(exc.value)
    with pytest.raises(InvalidArgument, match="refiner.max_episodes"):
        RefinerSection(max_episodes=0).validate()
