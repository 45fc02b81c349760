"""The coherence term (issue 45): with `training.coherence_loss_weight` a tracks run's loss
is the weighted flow-matching loss plus that weight times `coherence_loss` over the moving
cells, in the real training loop, and each step reports the term (`coherence_loss`)."""

from __future__ import annotations

import math

import torch
from k4d_model.checkpoints import save_k4d
from k4d_model.testing import tiny_per_frame_components
from k4d_trainer.config import load_config_file
from k4d_trainer.objective import (
    coherence_loss,
    flow_matching_loss,
    loss_weights,
    moving_cells,
    noise_batch,
)
from k4d_trainer.runs import read_metrics
from k4d_trainer.trainer import Trainer


def test_a_tracks_run_adds_the_coherence_term_and_reports_it(tmp_path, recipe, make_dataset):
    save_k4d(tiny_per_frame_components(), tmp_path / "stage1")
    data = make_dataset(tmp_path / "data", count=2, objects=True, frames=5, height=32, width=48)
    path = recipe(tmp_path, data, None, recipe="from-scratch",
                  model={"size": "tiny", "init": str(tmp_path / "stage1"),
                         "activation_checkpointing": False},
                  training={"steps": 2, "global_batch_size": 2, "lr": 1e-3, "warmup_steps": 0,
                            "latent_target": "tracks", "motion_scale": 14.0,
                            "moving_loss_weight": 8.0, "coherence_loss_weight": 0.5})
    trainer = Trainer.build(load_config_file(path), str(tmp_path / "run"))
    try:
        position = trainer.sampler.state_dict()
        items = trainer.sampler.next_batch()
        trainer.sampler.load_state_dict(position)
        batch = {k: torch.stack([trainer.cache.load(e)[k] for _, e in items])
                 for k in ("latents", "condition", "image_embeds", "arm_cond", "change")}
        t = trainer.config.training
        noised = noise_batch(batch, [n for n, _ in items], trainer.config.seed, trainer.schedule,
                             t.soft_mask_ratio, trainer.mask_channels, t.latent_target,
                             motion_scale=t.motion_scale)
        with torch.no_grad():
            prediction = trainer.components.transformer(
                noised.model_input, noised.timestep, batch["image_embeds"], noised.arm_cond,
                return_dict=False)[0]
        moving = moving_cells(batch["change"], noised.clean)
        coherence = float(coherence_loss(prediction, noised.target, noised.sigma, moving))
        assert moving.sum() >= 2 and coherence > 0  # the pushed block moves: a real term
        weights = loss_weights(batch, t.changed_loss_weight, t.robot_loss_weight,
                               t.moving_loss_weight, noised.clean)
        expected = float(flow_matching_loss(prediction, noised.target, weights)) + 0.5 * coherence
        status = trainer.train()
    finally:
        trainer.close()
    assert status.state == "succeeded"
    first = read_metrics(str(tmp_path / "run"))[0]
    assert math.isclose(first["coherence_loss"], coherence, rel_tol=1e-5, abs_tol=1e-7)
    assert math.isclose(first["loss"], expected, rel_tol=1e-5)
