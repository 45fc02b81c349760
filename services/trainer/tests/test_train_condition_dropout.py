"""Condition dropout (issue 45): `training.condition_dropout` shows the transformer a scene
with no robot in view in place of some samples' robot condition, in the real training loop,
and the published model samples with guidance against that scene (`guidance_negative:
no-robot`, `model.guidance_scale`, `model.guidance_halves`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from k4d.errors import InvalidArgument
from k4d.store import LocalStore
from k4d.tensor_io import sha256_file
from k4d_model import checkpoints, registry
from k4d_model.checkpoints import build_components, save_k4d
from k4d_model.conditions import PointmapNormalization
from k4d_model.model.configs import get_model_config
from k4d_model.options import check_model_extra
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.results import RobotCondition
from k4d_model.testing import CallableDenoiser, sliding_box_robot
from k4d_trainer.config import load_config_file
from k4d_trainer.objective import flow_matching_loss, noise_batch
from k4d_trainer.runs import read_metrics
from k4d_trainer.trainer import Trainer

REPO = Path(__file__).resolve().parents[3]


def test_dropout_trains_on_the_no_robot_scene_and_publishes_a_guided_model(
        tmp_path, recipe, episodes_dir):
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    save_k4d(saved, tmp_path / "stage1")
    store = tmp_path / "store"
    path = recipe(tmp_path, episodes_dir, None, recipe="from-scratch",
                  model={"size": "tiny", "init": str(tmp_path / "stage1"),
                         "activation_checkpointing": False, "guidance_scale": 3.0,
                         "guidance_halves": "rgb"},
                  training={"steps": 2, "global_batch_size": 2, "lr": 1e-3, "warmup_steps": 0,
                            "condition_dropout": 0.9},
                  publish={"name": "tiny-guided", "version": "1", "store_uri": store.as_uri()})
    trainer = Trainer.build(load_config_file(path), str(tmp_path / "run"))
    try:
        # the no-robot condition is the one the generator prepares for guidance's negative
        pipe = Kinema4DPipeline(trainer.components, backend=None)
        empty = RobotCondition.empty(5, 32, 48)
        with torch.no_grad():
            expected = pipe.prepare_arm_cond(
                empty, PointmapNormalization.from_points(empty.pointmap, empty.mask))[0]
        torch.testing.assert_close(trainer.no_robot, expected.float().cpu())

        # step 1's loss, computed here from the same batch, noise and dropout as the loop's
        position = trainer.sampler.state_dict()
        items = trainer.sampler.next_batch()
        trainer.sampler.load_state_dict(position)
        batch = {k: torch.stack([trainer.cache.load(e)[k] for _, e in items])
                 for k in ("latents", "condition", "image_embeds", "arm_cond")}
        t = trainer.config.training
        noised = noise_batch(batch, [n for n, _ in items], trainer.config.seed, trainer.schedule,
                             t.soft_mask_ratio, trainer.mask_channels, t.latent_target, 0.9,
                             trainer.no_robot)
        assert (noised.arm_cond == trainer.no_robot).flatten(1).all(dim=1).any()
        with torch.no_grad():
            prediction = trainer.components.transformer(
                noised.model_input, noised.timestep, batch["image_embeds"], noised.arm_cond,
                return_dict=False)[0]
        expected_loss = float(flow_matching_loss(prediction, noised.target))
        status = trainer.train()
    finally:
        trainer.close()
    assert status.state == "succeeded"
    first = read_metrics(str(tmp_path / "run"))[0]["loss"]
    assert abs(first - expected_loss) <= 1e-5 * abs(expected_loss)

    local = registry.fetch(LocalStore(store), "tiny-guided", "1", tmp_path / "cache")
    meta = json.loads((local / "k4d_model.json").read_text())
    assert meta["guidance_scale"] == 3.0
    assert meta["extra"]["guidance_negative"] == "no-robot"
    assert meta["extra"]["guidance_halves"] == "rgb"
    model = checkpoints.load_model(local)
    denoiser = CallableDenoiser(model.transformer)
    image, robot = sliding_box_robot()
    result = Kinema4DPipeline(model, backend=denoiser)(
        image, robot.rgb, robot.pointmap, robot.mask, num_steps=2, seed=0)
    guidance = result.metadata["guidance"]
    assert guidance["passes"] == 2 and guidance["reason"] == "negative condition"
    assert guidance["guidance"] == 3.0 and guidance["halves"] == "rgb"


def test_bad_dropout_guidance_and_negative_values_are_refused(tmp_path, recipe, episodes_dir):
    for field, training, model in (("training.condition_dropout", {"condition_dropout": 1.0}, {}),
                                   ("training.condition_dropout", {"condition_dropout": -0.1}, {}),
                                   ("model.guidance_scale", {}, {"guidance_scale": -1.0}),
                                   ("model.guidance_halves", {}, {"guidance_halves": "RGB"})):
        path = recipe(tmp_path, episodes_dir, None, recipe="from-scratch",
                      model={"size": "tiny", **model}, training=training)
        with pytest.raises(InvalidArgument, match=field):
            load_config_file(path)
    with pytest.raises(InvalidArgument, match="extra.guidance_negative"):
        check_model_extra({"guidance_negative": "no_robot"})
    with pytest.raises(InvalidArgument, match="extra.guidance_halves"):
        check_model_extra({"guidance_halves": "pointmap"})


def test_demo_model_options_rewrites_an_exports_guidance(tmp_path, recipe, episodes_dir):
    """`demo_model.py options` writes a recipe's guidance scale and halves into an exported
    model and refreshes its manifest, so the model still loads and passes its hash check."""
    components, _ = build_components(get_model_config("tiny"), seed=11)
    model = tmp_path / "model"
    save_k4d(components, model / "weights")
    (model / "manifest.json").write_text(json.dumps(
        registry.build_manifest(model / "weights", "tiny", "1")))
    path = recipe(tmp_path, episodes_dir, None, recipe="from-scratch",
                  model={"size": "tiny", "guidance_scale": 2.0, "guidance_halves": "rgb"})
    done = subprocess.run([sys.executable, str(REPO / "examples/train/demo_model.py"), "options",
                           "--config", str(path), "--model", str(model)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    meta = json.loads((model / "weights" / "k4d_model.json").read_text())
    assert meta["guidance_scale"] == 2.0 and meta["extra"]["guidance_halves"] == "rgb"
    listed = {f["path"]: f["sha256"] for f in
              json.loads((model / "manifest.json").read_text())["files"]}
    assert listed["k4d_model.json"] == sha256_file(model / "weights" / "k4d_model.json")
    assert checkpoints.load_model(model / "weights").info.extra["guidance_halves"] == "rgb"
