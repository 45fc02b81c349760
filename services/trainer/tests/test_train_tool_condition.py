"""The tool condition (`model.tool_condition`, k4d_trainer.tool_condition): the gripper's state
read off each episode's joints with its robot's kinematics, added to a starting model from a
zero projection, trained in the real loop and published with the model, which then samples
with the rollout's tool and refuses a rollout without one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from k4d.episodes import DatasetWriter, open_dataset
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.robots.descriptions import load_robot
from k4d_model.checkpoints import build_components, load_model, save_k4d
from k4d_model.conditions import tool_features
from k4d_model.model.configs import get_model_config
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.testing import CallableDenoiser
from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.config import ModelSection, load_config_file
from k4d_trainer.latents import clip_normalisation
from k4d_trainer.model import load_components
from k4d_trainer.objective import flow_matching_loss, noise_batch
from k4d_trainer.runs import read_metrics
from k4d_trainer.synthetic import synthetic_episode
from k4d_trainer.tool_condition import (
    TOOL_KEY,
    episode_camera_pose,
    episode_tool,
    tool_conditions,
)
from k4d_trainer.trainer import Trainer

OPEN, CLOSED = 0.04, 0.01  # the panda finger joint, metres


def _panda_dataset(root, count: int = 2, joint_names=None) -> str:
    """The trainer's synthetic episodes recorded as a panda whose gripper closes half-way
    through (its joints in the episode's own order: reversed, to test the reordering)."""
    panda = load_robot("panda")
    names = list(reversed(panda.joint_names)) if joint_names is None else joint_names
    writer = DatasetWriter(str(root))
    for i in range(count):
        meta, arrays = synthetic_episode(i)
        joints = np.zeros((meta.frames, len(names)))
        finger = np.where(np.arange(meta.frames) < meta.frames // 2, OPEN, CLOSED)
        if "panda_finger_joint1" in names:
            joints[:, names.index("panda_finger_joint1")] = finger
        meta = dataclasses.replace(meta, robot="panda", joint_names=names)
        writer.write_episode(meta, {**arrays, "joints": joints})
    writer.close()
    return str(root)


def test_episode_tool_reads_the_gripper_off_the_episode_joints(tmp_path):
    dataset = open_dataset(_panda_dataset(tmp_path / "ds", count=1))
    episode_id = dataset.episode_ids[0]
    frames = dataset.open(episode_id).meta.frames
    clip = ClipSpec(frames, 32, 48)
    tool = episode_tool(dataset.open(episode_id), clip)
    assert tool.frames == frames and not tool.holding
    np.testing.assert_allclose(tool.opening[0], OPEN)
    np.testing.assert_allclose(tool.opening[-1], CLOSED)
    features = tool_conditions(dataset, [episode_id], clip, 4)[episode_id]
    latent_frames = (frames - 1) // 4 + 1
    assert features.shape == (latent_frames, 4)
    np.testing.assert_allclose(features[0, 0], 1.0)
    np.testing.assert_allclose(features[-1, 0], CLOSED / OPEN, rtol=1e-6)


def test_episode_tool_names_a_joint_the_episode_lacks(tmp_path):
    names = load_robot("panda").joint_names[:-1]  # no finger
    dataset = open_dataset(_panda_dataset(tmp_path / "ds", count=1, joint_names=names))
    episode_id = dataset.episode_ids[0]
    with pytest.raises(InvalidArgument, match="model.tool_condition.*panda_finger_joint1"):
        episode_tool(dataset.open(episode_id), ClipSpec(9, 32, 48))


def test_tool_position_features_see_the_episode_tool_through_its_camera(tmp_path):
    dataset = open_dataset(_panda_dataset(tmp_path / "ds", count=1))
    episode_id = dataset.episode_ids[0]
    episode = dataset.open(episode_id)
    clip = ClipSpec(episode.meta.frames, 32, 48)
    features = tool_conditions(dataset, [episode_id], clip, 4, 10)[episode_id]
    latent_frames = (clip.num_frames - 1) // 4 + 1
    assert features.shape == (latent_frames, 10)
    tool = episode_tool(episode, clip)
    np.testing.assert_array_equal(features[:, :4], tool_features(tool, latent_frames, 4))
    # by hand: the tool's origin through the episode's camera, in its clip's normalisation
    pose = np.asarray(episode.meta.camera_at(0).T_cam_from_base)
    origins = tool.T_base_from_tool[np.arange(latent_frames) * 4, :3, 3]
    in_camera = origins @ pose[:3, :3].T + pose[:3, 3]
    norm = clip_normalisation(read_clip(episode, clip))
    np.testing.assert_allclose(features[:, 4:7], norm.normalise(in_camera.astype(np.float32)),
                               atol=1e-6)
    np.testing.assert_allclose(features[:, 7:], (in_camera - in_camera[0]) / norm.scale,
                               atol=1e-5)


@pytest.mark.parametrize("tool_position", [False, True], ids=["state", "position"])
def test_tool_condition_trains_from_the_init_and_ships_with_the_model(tmp_path, recipe,
                                                                     tool_position):
    features = 10 if tool_position else 4
    data = _panda_dataset(tmp_path / "ds", count=2)
    heldout = _panda_dataset(tmp_path / "heldout", count=1)
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    save_k4d(saved, tmp_path / "stage1")
    path = recipe(tmp_path, data, None, recipe="from-scratch",
                  model={"size": "tiny", "init": str(tmp_path / "stage1"),
                         "activation_checkpointing": False, "tool_condition": True,
                         "tool_position": tool_position},
                  training={"steps": 2, "global_batch_size": 2, "lr": 1e-2, "warmup_steps": 0,
                            "sample_every": 2, "sample_episodes": 1, "sample_uri": heldout},
                  checkpoint={"every": 0})
    trainer = Trainer.build(load_config_file(path), str(tmp_path / "run"))
    try:
        model = trainer.components.transformer
        assert model.config.tool_features == features
        assert not model.tool_embedding[2].weight.any()  # starts as the init model

        # step 1's loss, from the same batch, noise and tool features as the loop's
        position = trainer.sampler.state_dict()
        items = trainer.sampler.next_batch()
        trainer.sampler.load_state_dict(position)
        samples = [trainer.load_sample(e) for _, e in items]
        batch = {k: torch.stack([s[k] for s in samples]) for k in samples[0]}
        assert batch[TOOL_KEY].shape == (2, 2, features)  # 5 frames: 2 latent frames
        t = trainer.config.training
        noised = noise_batch(batch, [n for n, _ in items], trainer.config.seed, trainer.schedule,
                             t.soft_mask_ratio, trainer.mask_channels)
        with torch.no_grad():
            prediction = model(noised.model_input, noised.timestep, batch["image_embeds"],
                               noised.arm_cond, return_dict=False, tool_cond=batch[TOOL_KEY])[0]
        expected = float(flow_matching_loss(prediction, noised.target))
        status = trainer.train()
    finally:
        trainer.close()
    assert status.state == "succeeded", status.error
    lines = read_metrics(str(tmp_path / "run"))
    assert abs(lines[0]["loss"] - expected) <= 1e-5 * abs(expected)
    assert any(line.get("kind") == "sample" for line in lines)  # sampled with the tool
    assert model.tool_embedding[2].weight.any()  # it learned from the tool

    save_k4d(trainer.components, tmp_path / "published")
    loaded = load_model(tmp_path / "published")
    assert loaded.transformer.config.tool_features == features
    pipe = Kinema4DPipeline(loaded, backend=CallableDenoiser(loaded.transformer))
    dataset = open_dataset(heldout)
    episode = dataset.open(dataset.episode_ids[0])
    clip = trainer.clip
    arrays = read_clip(episode, clip)
    robot = dict(robot_rgb=arrays["robot_rgb"], robot_mask=arrays["robot_mask"],
                 robot_pointmap=arrays["robot_pointmap"].astype(np.float32))
    with pytest.raises(FailedPrecondition, match="tool track"):
        pipe(arrays["rgb"][0], num_steps=1, **robot)
    tool = episode_tool(episode, clip)
    if tool_position:
        with pytest.raises(FailedPrecondition, match="T_cam_from_base"):
            pipe(arrays["rgb"][0], num_steps=1, tool=tool, **robot)
    result = pipe(arrays["rgb"][0], num_steps=1, tool=tool,
                  T_cam_from_base=episode_camera_pose(episode), **robot)
    assert result.metadata["tool_read"]


def test_a_starting_model_that_reads_the_tool_must_be_asked_to(tmp_path):
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    saved.transformer.add_tool_embedding(4)
    save_k4d(saved, tmp_path / "stage1")
    with pytest.raises(InvalidArgument, match="model.tool_condition"):
        load_components("from-scratch", ModelSection(size="tiny", init=str(tmp_path / "stage1")),
                        11)
    kept = load_components("from-scratch", ModelSection(size="tiny", init=str(tmp_path / "stage1"),
                                                        tool_condition=True), 11)
    assert kept.transformer.config.tool_features == 4
    with pytest.raises(InvalidArgument, match="model.tool_position: false"):
        load_components("from-scratch", ModelSection(size="tiny", init=str(tmp_path / "stage1"),
                                                     tool_condition=True, tool_position=True),
                        11)


def test_tool_position_needs_the_tool_condition():
    with pytest.raises(InvalidArgument, match="model.tool_position.*tool_condition"):
        ModelSection(size="tiny", tool_position=True).validate("from-scratch")
