"""`training.ema_decay` (k4d_trainer.ema): the moving average of the weights follows
diffusers' EMAModel, survives a checkpoint, is what a run samples and publishes, and
`demo_model.py export --weights raw|ema` reads either from a checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from k4d.errors import InvalidArgument
from k4d_model.checkpoints import build_components, load_model, save_k4d
from k4d_model.model.configs import get_model_config
from k4d_trainer.config import TrainingSection, load_config_file
from k4d_trainer.ema import EmaState
from k4d_trainer.trainer import Trainer

REPO = Path(__file__).resolve().parents[3]


def _params() -> dict[str, torch.nn.Parameter]:
    return {"a": torch.nn.Parameter(torch.tensor([1.0, 2.0])),
            "b": torch.nn.Parameter(torch.tensor([[4.0]]))}


def test_the_average_follows_the_warmed_up_decay():
    params = _params()
    ema = EmaState(params, decay=0.9)
    ema.update()  # the first update: decay 0, the average is the weights
    with torch.no_grad():
        params["a"].add_(10.0)
    ema.update()  # decay min(0.9, (1 + 1) / (10 + 1)) = 2/11
    d = 2 / 11
    expected = d * torch.tensor([1.0, 2.0]) + (1 - d) * torch.tensor([11.0, 12.0])
    torch.testing.assert_close(ema.state_dict()["weights"]["a"], expected)
    assert ema.updates == 2


def test_without_warmup_the_decay_holds_from_the_first_update():
    params = _params()
    ema = EmaState(params, decay=0.9, warmup=False)  # a stage from a trained model.init
    ema.update()  # EMAModel's first update copies the weights, with or without warm-up
    with torch.no_grad():
        params["a"].add_(10.0)
    ema.update()
    expected = 0.9 * torch.tensor([1.0, 2.0]) + 0.1 * torch.tensor([11.0, 12.0])
    torch.testing.assert_close(ema.state_dict()["weights"]["a"], expected)


def test_swapped_in_samples_the_average_and_trains_on_the_weights():
    params = _params()
    ema = EmaState(params, decay=0.9)
    ema.update()
    with torch.no_grad():
        params["b"].fill_(-1.0)
    with ema.swapped_in():
        assert params["b"].item() == 4.0
    assert params["b"].item() == -1.0


def test_the_average_round_trips_through_a_checkpoint(tmp_path):
    params = _params()
    ema = EmaState(params, decay=0.5)
    ema.update()
    with torch.no_grad():
        params["a"].mul_(3.0)
    ema.update()
    dcp.save({"ema": ema}, checkpoint_id=str(tmp_path / "ckpt"))
    other = EmaState(_params(), decay=0.5)
    dcp.load({"ema": other}, checkpoint_id=str(tmp_path / "ckpt"))
    assert other.updates == 2
    for name in ("a", "b"):
        torch.testing.assert_close(other.state_dict()["weights"][name],
                                   ema.state_dict()["weights"][name])


@pytest.mark.parametrize("decay", [1.0, -0.1, float("nan")])
def test_a_decay_outside_the_unit_interval_is_refused(decay):
    with pytest.raises(InvalidArgument, match="training.ema_decay"):
        TrainingSection(ema_decay=decay).validate()


def test_a_warmup_that_is_not_a_boolean_is_refused(tmp_path):
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({"recipe": "from-scratch", "model": {"size": "tiny"},
                                "data": {"uri": str(tmp_path)},
                                "training": {"ema_decay": 0.9, "ema_warmup": "no"}}))
    with pytest.raises(InvalidArgument, match="training.ema_warmup"):
        load_config_file(str(path))


def _tiny_recipe(tmp_path, recipe, episodes_dir, **training) -> Path:
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    save_k4d(saved, tmp_path / "stage1")
    return recipe(tmp_path, episodes_dir, None, recipe="from-scratch",
                  model={"size": "tiny", "init": str(tmp_path / "stage1"),
                         "activation_checkpointing": False},
                  training={"steps": 3, "global_batch_size": 2, "lr": 1e-2, "warmup_steps": 0,
                            **training},
                  checkpoint={"every": 1, "keep": 0})


def _train(path: Path, run: Path, resume: bool = False) -> Trainer:
    trainer = Trainer.build(load_config_file(path), str(run), resume=resume)
    try:
        assert trainer.train().state == "succeeded"
    finally:
        trainer.close()
    return trainer


def _export(path: Path, run: Path, out: Path, weights: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "examples/train/demo_model.py"), "export",
                           "--config", str(path), "--run", str(run), "--out", str(out),
                           "--weights", weights], capture_output=True, text=True, timeout=300)


def _transformer(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_model(model_dir / "weights").transformer.state_dict()


def test_a_run_publishes_the_average_and_export_reads_either(tmp_path, recipe, episodes_dir):
    path = _tiny_recipe(tmp_path, recipe, episodes_dir, ema_decay=0.5)
    run = tmp_path / "run"
    trainer = _train(path, run)
    assert trainer.ema.updates == 3
    averaged = {n: p.detach().clone() for n, p in trainer.components.transformer.named_parameters()
                if p.requires_grad}
    torch.testing.assert_close(averaged, trainer.ema.state_dict()["weights"])

    assert _export(path, run, tmp_path / "ema", "auto").returncode == 0
    assert _export(path, run, tmp_path / "raw", "raw").returncode == 0
    ema, raw = _transformer(tmp_path / "ema"), _transformer(tmp_path / "raw")
    for name, value in averaged.items():  # the published weights are the average
        torch.testing.assert_close(ema[name], value, msg=name)
    assert any(not torch.equal(raw[n], ema[n]) for n in averaged)  # the last step differs
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("ema", "raw")]
    assert [m["training"]["weights"] for m in manifests] == ["ema", "raw"]
    assert manifests[1]["version"].endswith("-raw")


def test_turning_the_average_on_at_a_resume_starts_it_there(tmp_path, recipe, episodes_dir):
    plain = _tiny_recipe(tmp_path, recipe, episodes_dir)
    run = tmp_path / "run"
    _train(plain, run)
    done = _export(plain, run, tmp_path / "ema", "ema")
    assert done.returncode != 0 and "trains no weight average" in done.stderr

    config = json.loads(plain.read_text())
    config["training"].update(steps=5, ema_decay=0.9)
    averaged = tmp_path / "averaged.json"
    averaged.write_text(json.dumps(config))
    trainer = _train(averaged, run, resume=True)
    assert trainer.state.step == 5 and trainer.ema.updates == 2  # steps 4 and 5
    assert _export(averaged, run, tmp_path / "ema", "ema").returncode == 0


def test_the_raw_export_of_an_averaged_run_leaves_its_refiner_out(tmp_path, recipe,
                                                                   make_dataset):
    """The cascade stage samples its rollouts with the average, so its refiner goes with the
    average's export only; the last step's export is the sample alone, its option too."""
    data = make_dataset(tmp_path / "data", count=2, frames=5, height=32, width=48)
    other = make_dataset(tmp_path / "other", count=2, frames=5, height=32, width=48)
    saved, _ = build_components(get_model_config("tiny"), seed=11)
    save_k4d(saved, tmp_path / "stage1")
    path = recipe(tmp_path, data, None, recipe="from-scratch",
                  model={"size": "tiny", "init": str(tmp_path / "stage1"),
                         "activation_checkpointing": False,
                         "fidelity": {"first_frame": "given", "decode": "relative",
                                      "cascade": "sample"}},
                  training={"steps": 2, "global_batch_size": 2, "lr": 1e-2, "warmup_steps": 0,
                            "ema_decay": 0.5, "ema_warmup": False},
                  cascade={"steps": 2, "data_uri": other, "batch_size": 2, "channels": [8, 16],
                           "warmup_steps": 0})
    _train(path, tmp_path / "run")
    assert _export(path, tmp_path / "run", tmp_path / "ema", "ema").returncode == 0
    raw = _export(path, tmp_path / "run", tmp_path / "raw", "raw")
    assert raw.returncode == 0 and "exported without it" in raw.stderr
    ema_model, raw_model = (load_model(tmp_path / d / "weights") for d in ("ema", "raw"))
    assert ema_model.cascade is not None and ema_model.info.extra["cascade"] == "sample"
    assert raw_model.cascade is None and "cascade" not in raw_model.info.extra
    manifest = json.loads((tmp_path / "raw" / "manifest.json").read_text())
    assert "cascade" not in manifest["fidelity"]
    assert not any(f["path"].startswith("cascade/") for f in manifest["files"])
    # a recipe without the output option exports the sample alone from the same run
    config = json.loads(path.read_text())
    config["model"]["fidelity"].pop("cascade")
    config["cascade"]["steps"] = 0
    sample_only = tmp_path / "sample-only.json"
    sample_only.write_text(json.dumps(config))
    assert _export(sample_only, tmp_path / "run", tmp_path / "sample", "ema").returncode == 0
    sample_model = load_model(tmp_path / "sample" / "weights")
    assert sample_model.cascade is None and "cascade" not in sample_model.info.extra
