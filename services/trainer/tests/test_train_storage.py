"""Runs and latent caches on object storage and the encode-latents command: checkpoints
through fsspec to a real S3 server (moto), resumed from there; latents encoded once,
skipped on a rerun."""

from __future__ import annotations

import json

import pytest
from k4d.cli.main import main
from k4d.config import load_config
from k4d_trainer.config import load_config_file
from k4d_trainer.main import run_training
from k4d_trainer.runs import read_metrics, read_status


@pytest.mark.integration
def test_run_on_s3_checkpoints_and_resumes(tmp_path, s3_store, s3_server, recipe, episodes_dir,
                                           tiny_official):
    env = load_config(env={}, s3_endpoint=s3_server.endpoint,
                      s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key,
                      s3_region=s3_server.region)
    run = f"s3://{s3_store.bucket}/runs/r1"
    path = recipe(tmp_path, episodes_dir, str(tiny_official),
                  data={"uri": episodes_dir, "latents_uri": f"s3://{s3_store.bucket}/latents"},
                  training={"steps": 2, "global_batch_size": 2},
                  checkpoint={"every": 1, "keep": 1},
                  observability={"progress_bar": False, "tensorboard": True})
    first = run_training(load_config_file(path), run, env_config=env)
    assert first.state == "succeeded" and first.checkpoint_uri == f"{run}/checkpoints/step-00000002"
    config = load_config_file(path)
    config.training.steps = 4
    second = run_training(config, run, resume=True, env_config=env)
    assert second.state == "succeeded" and second.step == 4
    assert read_status(run, env).step == 4
    assert [m["step"] for m in read_metrics(run, env)] == [1, 2, 3, 4]
    from k4d_trainer.runs import RunDir

    rundir = RunDir(run, env)
    assert rundir.exists("checkpoints/step-00000004/COMMITTED")
    assert not rundir.exists("checkpoints/step-00000002")  # keep: 1
    assert rundir.exists("loss.png") and rundir.exists("tensorboard")
    assert rundir.fs.exists(f"{s3_store.bucket}/latents/index.json")


def test_encode_latents_writes_once_and_skips(tmp_path, capsys, recipe, episodes_dir,
                                              tiny_official):
    path = recipe(tmp_path, episodes_dir, str(tiny_official))
    out = tmp_path / "latents"
    assert main(["train", "encode-latents", "--config", str(path), "--out", str(out)]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["episodes"] == 4 and first["encoded"] == 4
    assert len(list(out.glob("*.safetensors"))) == 4
    index = json.loads((out / "index.json").read_text())
    assert index["fingerprint"] == first["fingerprint"] and index["clip"] == [5, 32, 48]
    assert main(["train", "encode-latents", "--config", str(path), "--out", str(out)]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["encoded"] == 0  # resumable: everything present is skipped
