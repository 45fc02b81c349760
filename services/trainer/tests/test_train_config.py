"""Bad recipes and bad inputs: one clear line naming the field, exit code 2, before any
training starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k4d.cli.main import main
from k4d.errors import InvalidArgument
from k4d_trainer.config import config_from_dict, load_config_file, resolve_degrees
from k4d_trainer.schedule import lr_lambda


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(["train", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "error" in line]


@pytest.mark.parametrize("change, field", [
    ({"model": {"bogus": 1}}, "model.bogus"),
    ({"trainig": {}}, "trainig"),
    ({"training": {"lr": -1e-4}}, "training.lr"),
    ({"training": {"lr": "fast"}}, "training.lr"),
    ({"training": {"steps": 0}}, "training.steps"),
    ({"model": {"variant": "rgb"}}, "model.variant"),
    ({"model": {"precision": "bf16-native"}}, "model.precision"),
    ({"model": {"num_frames": 6}}, "model.num_frames"),
    ({"parallelism": {"dp_shard": 0}}, "parallelism.dp_shard"),
    ({"parallelism": {"nnodes": "2:1"}}, "parallelism.nnodes"),
    ({"recipe": "dreambooth"}, "recipe"),
    ({"model": {"fidelity": {"decode": "absolute"}}}, "model.fidelity.decode"),
    ({"model": {"fidelity": {"anchor": True}}}, "model.fidelity"),
    ({"model": {"fidelity": {"change_threshold": -1}}}, "model.fidelity.change_threshold"),
    ({"training": {"changed_loss_weight": -2}}, "training.changed_loss_weight"),
    ({"training": {"robot_loss_weight": "heavy"}}, "training.robot_loss_weight"),
    ({"model": {"init": "elsewhere"}}, "model.init"),
    ({"training": {"latent_target": "delta"}}, "training.latent_target"),
    ({"training": {"motion_scale": 0}}, "training.motion_scale"),
    ({"training": {"motion_scale": 10.0, "latent_target": "change"}}, "training.motion_scale"),
    ({"training": {"moving_loss_weight": 8.0, "latent_target": "change"}},
     "training.moving_loss_weight"),  # no motion target
    ({"training": {"moving_loss_weight": -1.0, "latent_target": "tracks"}},
     "training.moving_loss_weight"),
    ({"training": {"coherence_loss_weight": 1.0, "latent_target": "change"}},
     "training.coherence_loss_weight"),  # no motion target
    ({"training": {"coherence_loss_weight": float("nan"), "latent_target": "tracks"}},
     "training.coherence_loss_weight"),
    ({"model": {"fidelity": {"motion_samples": 4}}}, "model.fidelity.motion_samples"),  # no tracks
    ({"training": {"sample_every": 50}}, "training.sample_uri"),  # no episodes to sample
    ({"training": {"decay_steps": -1}}, "training.decay_steps"),
    ({"training": {"decay_steps": 10, "lr_schedule": "cosine"}}, "training.decay_steps"),
])
def test_bad_recipe_is_one_error_naming_the_field(tmp_path, capsys, recipe, change, field):
    path = recipe(tmp_path, str(tmp_path / "data"), str(tmp_path / "base"), **change)
    code, line = _run(capsys, "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2
    assert line.startswith("k4d train: error: ") and field in line, line
    assert not (tmp_path / "run").exists()  # nothing started


def test_warmup_stable_decay_cools_down_at_the_runs_end():
    factor = lr_lambda(warmup=10, total=100, schedule="constant", decay=40)
    assert [round(factor(s), 2) for s in (0, 9, 10, 60, 80, 99, 100)] == \
        [0.1, 1.0, 1.0, 1.0, 0.5, 0.03, 0.0]
    # a resumed run given more steps keeps the full lr until its own decay starts
    assert lr_lambda(10, 200, "constant", 40)(80) == 1.0
    assert lr_lambda(10, 100, "constant")(99) == 1.0  # no decay: constant to the end


def test_yaml_numbers_and_defaults():
    config = config_from_dict({"recipe": "from-scratch", "model": {"size": "tiny"},
                               "training": {"lr": "2e-5"}})
    assert config.training.lr == 2e-5 and config.training.weight_decay == 1e-4
    assert config.training.warmup_steps == 100 and config.model.lora_rank == 64
    with pytest.raises(InvalidArgument, match="model.base"):
        config_from_dict({"recipe": "from-scratch", "model": {"size": "tiny", "base": "x"}})
    with pytest.raises(InvalidArgument, match="model.base"):
        config_from_dict({"recipe": "finetune-lora"})
    native = config_from_dict({"recipe": "from-scratch",
                               "model": {"size": "tiny", "precision": "bf16-if-native"}})
    assert native.model.precision == "bf16-if-native"


def test_fidelity_options_reach_the_published_model():
    from k4d_trainer.model import load_components

    fidelity = {"first_frame": "given", "decode": "relative", "change_threshold": 12.0}
    config = config_from_dict({"recipe": "from-scratch",
                               "model": {"size": "tiny", "fidelity": fidelity}})
    components = load_components("from-scratch", config.model, seed=0)
    assert {k: components.info.extra[k] for k in fidelity} == fidelity
    assert components.info.extra["vae_decode"] == "split"


@pytest.mark.parametrize("target", ["change", "tracks"])
def test_change_and_tracks_targets_need_a_per_frame_vae(target):
    from k4d_model.options import check_model_extra
    from k4d_trainer.model import load_components, set_latent_target

    config = config_from_dict({"recipe": "from-scratch", "model": {"size": "tiny"}})
    components = load_components("from-scratch", config.model, seed=0)
    with pytest.raises(InvalidArgument, match=f"training.latent_target.*{target}"):
        set_latent_target(components, target)
    config = config_from_dict({"recipe": "from-scratch", "model": {"size": "small-f4"},
                               "training": {"latent_target": target}})
    components = load_components("from-scratch", config.model, seed=0)
    set_latent_target(components, config.training.latent_target)
    assert components.info.extra["latent_target"] == target
    assert "motion_scale" not in components.info.extra  # 1 is the default, left out
    check_model_extra(components.info.extra)  # what it publishes loads
    if target == "tracks":
        set_latent_target(components, target, motion_scale=10.0)
        assert components.info.extra["motion_scale"] == 10.0
        check_model_extra(components.info.extra)


def test_init_model_starts_from_its_weights(tmp_path):
    """model.init: a from-scratch model of the size that starts from a saved k4d model's
    transformer and VAE; a model of another size or clip is refused naming the field."""
    import torch
    from k4d.errors import NotFound
    from k4d_model.checkpoints import build_components, save_k4d
    from k4d_model.model.configs import get_model_config
    from k4d_trainer.model import load_components

    saved, _ = build_components(get_model_config("tiny"), seed=7)
    save_k4d(saved, tmp_path / "tiny")
    config = config_from_dict({"recipe": "from-scratch",
                               "model": {"size": "tiny", "init": str(tmp_path / "tiny"),
                                         "fidelity": {"first_frame": "given"}}})
    components = load_components("from-scratch", config.model, seed=0)
    for ours, theirs in ((components.transformer, saved.transformer),
                         (components.vae, saved.vae)):
        for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert components.info.extra["first_frame"] == "given"

    other = config_from_dict({"recipe": "from-scratch",
                              "model": {"size": "small", "init": str(tmp_path / "tiny")}})
    with pytest.raises(InvalidArgument, match="model.init"):
        load_components("from-scratch", other.model, seed=0)
    missing = config_from_dict({"recipe": "from-scratch",
                                "model": {"size": "tiny", "init": str(tmp_path / "none")}})
    with pytest.raises(NotFound, match="model.init"):
        load_components("from-scratch", missing.model, seed=0)


def test_degrees_must_multiply_to_the_world_size():
    config = config_from_dict({"recipe": "from-scratch", "model": {"size": "tiny"},
                               "parallelism": {"dp_replicate": 2, "dp_shard": 2}})
    assert resolve_degrees(config.parallelism, 4) == (2, 2)
    with pytest.raises(InvalidArgument, match=r"dp_replicate 2 x dp_shard 2 = 4 does not match "
                                              r"the world size 2"):
        resolve_degrees(config.parallelism, 2)
    rest = config_from_dict({"recipe": "from-scratch", "model": {"size": "tiny"},
                             "parallelism": {"dp_replicate": -1, "dp_shard": 2}})
    assert resolve_degrees(rest.parallelism, 6) == (3, 2)
    with pytest.raises(InvalidArgument, match="not divisible by dp_shard 2"):
        resolve_degrees(rest.parallelism, 3)


def test_world_size_mismatch_fails_before_launch(tmp_path, capsys, recipe):
    path = recipe(tmp_path, str(tmp_path / "data"), str(tmp_path / "base"),
                  parallelism={"dp_replicate": 4, "dp_shard": 1})
    code, line = _run(capsys, "--config", str(path), "--out", str(tmp_path / "run"),
                      "--nproc", "2")
    assert code == 2 and "does not match the world size 2" in line, line


def test_missing_dataset(tmp_path, capsys, tiny_official, recipe):
    path = recipe(tmp_path, str(tmp_path / "nowhere"), str(tiny_official))
    code, line = _run(capsys, "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "nowhere" in line and "neither a k4d episode dataset" in line, line
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "failed" and "nowhere" in status["error"]


def test_unadaptable_resolution(tmp_path, capsys, tiny_official, recipe, make_dataset):
    data = make_dataset(tmp_path / "small", count=1, frames=9, height=12, width=16)
    path = recipe(tmp_path, data, str(tiny_official))
    code, line = _run(capsys, "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "16x12" in line and "data.max_upscale" in line, line


def test_too_few_frames(tmp_path, capsys, tiny_official, recipe, make_dataset):
    data = make_dataset(tmp_path / "short", count=1, frames=3)
    path = recipe(tmp_path, data, str(tiny_official))
    code, line = _run(capsys, "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "has 3 frames" in line, line


def test_status_of_a_missing_run(tmp_path, capsys):
    code, line = _run(capsys, "status", str(tmp_path / "none"))
    assert code == 2 and "status.json not found" in line


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples" / "train").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_recipe_loads(path):
    """The recipes under examples/train (the demo model's and each experiment a model card
    or docs/ cites by name, tiny-cpu.yaml and finetune-wan14b.yaml too) stay valid as the
    schema moves: a renamed or removed key fails here, not in a reader's session."""
    config = load_config_file(str(path))
    assert config.recipe in ("finetune-lora", "from-scratch")
    assert config.training.steps > 0


def test_the_demo_recipe_estimates_frame_0_depth_with_a_geometry_network_alone():
    config = load_config_file(str(next(p for p in EXAMPLES if p.name == "demo-model.yaml")))
    assert config.refiner.steps > 0 and config.refiner.first_depth_weight > 0
    assert config.refiner.colour_weight == 0 and config.refiner.mask_weight == 0
    assert config.refiner.plane_weight == 0  # the depth is the network's, not a plane's
    assert config.model.fidelity["refiner_first_depth"] == "estimated"
