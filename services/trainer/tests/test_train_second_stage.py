"""A second stage of the from-scratch recipe (issue 21): `model.init` starts the transformer
from a saved model and keeps its VAE (no VAE stage), and `training.changed_loss_weight`
weights the loss where the scene changed, in the real training loop."""

from __future__ import annotations

import torch
from k4d_model.cascade import CascadeConfig, SampleRefiner
from k4d_model.checkpoints import build_components, load_model, save_k4d
from k4d_model.model.configs import get_model_config
from k4d_trainer.config import ModelSection, load_config_file
from k4d_trainer.model import load_components
from k4d_trainer.objective import flow_matching_loss, loss_weights, noise_batch
from k4d_trainer.runs import read_metrics
from k4d_trainer.trainer import Trainer


def test_second_stage_starts_from_init_and_weights_the_changed_cells(tmp_path, recipe,
                                                                      episodes_dir):
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    save_k4d(saved, tmp_path / "stage1")
    path = recipe(tmp_path, episodes_dir, None, recipe="from-scratch",
                  model={"size": "tiny", "init": str(tmp_path / "stage1"),
                         "activation_checkpointing": False},
                  training={"steps": 2, "global_batch_size": 2, "lr": 1e-3, "warmup_steps": 0,
                            "changed_loss_weight": 5.0, "robot_loss_weight": 2.0})
    trainer = Trainer.build(load_config_file(path), str(tmp_path / "run"))
    try:
        model = trainer.components.transformer
        for (name, ours), theirs in zip(model.state_dict().items(),
                                        saved.transformer.state_dict().values(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0, msg=name)
        assert not (tmp_path / "run" / "vae").exists()  # the init model's VAE, no VAE stage

        # Step 1's loss, computed here from the same batch and noise as the loop will.
        position = trainer.sampler.state_dict()
        items = trainer.sampler.next_batch()
        trainer.sampler.load_state_dict(position)
        batch = {k: torch.stack([trainer.cache.load(e)[k] for _, e in items])
                 for k in ("latents", "condition", "image_embeds", "arm_cond", "change")}
        assert batch["change"].sum() > 0  # the block moves
        t = trainer.config.training
        noised = noise_batch(batch, [n for n, _ in items], trainer.config.seed, trainer.schedule,
                             t.soft_mask_ratio, trainer.mask_channels)
        with torch.no_grad():
            prediction = model(noised.model_input, noised.timestep, batch["image_embeds"],
                               noised.arm_cond, return_dict=False)[0]
        weighted = flow_matching_loss(prediction, noised.target, loss_weights(batch, 5.0, 2.0))
        plain = flow_matching_loss(prediction, noised.target)
        status = trainer.train()
    finally:
        trainer.close()
    assert status.state == "succeeded"
    first = read_metrics(str(tmp_path / "run"))[0]["loss"]
    assert abs(first - float(weighted)) <= 1e-5 * abs(float(weighted))
    assert abs(float(weighted) - float(plain)) > 1e-3 * float(plain)


def test_second_stage_leaves_the_init_models_sample_refiner_behind(tmp_path):
    """The init's sample refiner learned the rollouts of the init's transformer: a run that
    trains that transformer further trains its own (the cascade section) or ships none, and
    never carries the init's silently (an export of such a run once did)."""
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    saved.cascade = SampleRefiner(CascadeConfig(channels=(8, 16)))
    saved.info.extra.update(decode="relative", cascade="colour")
    save_k4d(saved, tmp_path / "stage1")
    assert load_model(tmp_path / "stage1").cascade is not None

    components = load_components("from-scratch",
                                 ModelSection(size="tiny", init=str(tmp_path / "stage1")), 11)
    assert components.cascade is None
    assert "cascade" not in components.info.extra
    assert components.info.extra["decode"] == "relative"  # the init's other options stay
    # a run that trains its own refiner names the option in its config, as before
    own = load_components("from-scratch", ModelSection(
        size="tiny", init=str(tmp_path / "stage1"), fidelity={"decode": "relative",
                                                              "cascade": "sample"}), 11)
    assert own.info.extra["cascade"] == "sample" and own.cascade is None
