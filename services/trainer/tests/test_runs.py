"""The run-directory contract the control plane relies on (status, metrics, cancel marker),
on a local directory and on a real S3 server."""

from __future__ import annotations

import json

import pytest
from k4d.config import load_config
from k4d.errors import NotFound
from k4d_trainer import runs


def _roundtrip(run_uri: str, config=None) -> None:
    with pytest.raises(NotFound):
        runs.read_status(run_uri, config)
    run = runs.RunDir(run_uri, config)
    run.write_status(runs.RunStatus(state="running", step=3, total_steps=10, loss=0.25))
    status = runs.read_status(run_uri, config)
    assert (status.state, status.step, status.total_steps, status.loss) == ("running", 3, 10, 0.25)
    assert status.updated_at.endswith("Z") and not status.terminal

    assert not run.cancel_requested()
    runs.request_cancel(run_uri, config)
    runs.request_cancel(run_uri, config)  # idempotent
    assert run.cancel_requested()

    run.write_status(runs.RunStatus(state="cancelled", step=4, total_steps=10, loss=float("nan"),
                                    checkpoint_uri=run.child("checkpoints/step-00000004")))
    status = runs.read_status(run_uri, config)
    assert status.terminal and status.loss is None  # NaN is not JSON
    assert status.checkpoint_uri.endswith("checkpoints/step-00000004")

    assert runs.read_metrics(run_uri, config) == []
    run.write_bytes(runs.METRICS_FILE, b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n')
    assert [m["step"] for m in runs.read_metrics(run_uri, config)] == [1, 2]


def test_run_dir_local(tmp_path):
    _roundtrip(str(tmp_path / "run"))
    raw = json.loads((tmp_path / "run" / runs.STATUS_FILE).read_text())
    assert set(raw) == {"state", "step", "total_steps", "loss", "checkpoint_uri",
                        "published_model", "error", "updated_at"}
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]  # no temp left


def test_run_dir_file_uri_is_the_same_place(tmp_path):
    runs.RunDir(str(tmp_path)).write_status(runs.RunStatus(step=7))
    assert runs.read_status(tmp_path.as_uri()).step == 7


@pytest.mark.integration
def test_run_dir_s3(s3_store, s3_server):
    config = load_config(env={}, s3_endpoint=s3_server.endpoint,
                         s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key,
                         s3_region=s3_server.region)
    _roundtrip(f"s3://{s3_store.bucket}/runs/r1", config)


def test_bad_status_file_is_invalid_argument(tmp_path):
    (tmp_path / runs.STATUS_FILE).write_text('{"state": "exploded"}')
    with pytest.raises(Exception, match="not a run status"):
        runs.read_status(str(tmp_path))
