"""`k4d up` serves the shipped default model: it publishes models/demo-small (the model whose
manifest says `"default": true`, which `k4d simulate` runs without --model) into its
registry, and `k4d submit` without --model runs that model, not the static-world floor.

The proof that both modes ran the same model: the job names the shipped model's registry
version, and its rollout reproduces the golden slice `k4d simulate` is checked against
(models/demo-small/golden.json, test_sim_shipped_model.py), within the same tolerance."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "demo-small"
SERVICES = ["kinematics", "projection", "generator", "simulator"]


def _k4d(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k4d.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cluster(tmp_path):
    """`k4d up` with the simulation services, as a user starts it (no K4D_DEFAULT_MODEL:
    the root conftest pins it to static-world for the floor's tests)."""
    from k4d.testing.processes import k4d_up

    env = {k: v for k, v in os.environ.items()
           if k not in ("K4D_DEFAULT_MODEL", "K4D_SIMULATOR_DEFAULT_MODEL")}
    env.update(OMP_NUM_THREADS="1")
    with k4d_up(SERVICES, tmp_path / "logs", env) as up:
        yield up


@pytest.mark.skipif(not (SHIPPED / "manifest.json").is_file(), reason="no shipped model")
def test_submit_without_model_runs_the_shipped_default(cluster):
    from google.protobuf import json_format
    from k4d.store import get_array
    from k4d.store.s3 import S3Store
    from k4d.tensor_io import TensorRef
    from kinema4d.v1 import simulator_pb2

    address, env, table = cluster.addresses["simulator"], cluster.client_env, cluster.table
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    if manifest.get("default") is not True:
        pytest.skip("the shipped model is not the default")
    ref = f"registry:{manifest['name']}/{manifest['version']}"
    assert re.search(rf"^model\s+registry\s+{re.escape(ref)}\s+published$", table, re.M), table

    golden = json.loads((SHIPPED / "golden.json").read_text())
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in golden["args"]]
    assert "--model" not in args
    done = _k4d("submit", *args, "--address", address, "--wait", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    job_id = done.stdout.split()[0]
    shown = _k4d("jobs", job_id, "--address", address, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    job = json_format.ParseDict(json.loads(shown.stdout.strip().splitlines()[-1]),
                                simulator_pb2.Job(), ignore_unknown_fields=True)
    assert job.state == simulator_pb2.JobState.JOB_STATE_SUCCEEDED
    assert (job.result.model.name, job.result.model.version) == (manifest["name"],
                                                                 manifest["version"])

    store = S3Store(env["K4D_S3_ENDPOINT"], env["K4D_STORE_URI"].removeprefix("s3://"),
                    access_key=env["K4D_S3_ACCESS_KEY"], secret_key=env["K4D_S3_SECRET_KEY"],
                    region=env["K4D_S3_REGION"])
    try:
        rgb = get_array(store, TensorRef.from_proto(job.result.rgb))
    finally:
        store.close()
    frames, rows, cols = (np.array(golden["index"][k]) for k in ("frames", "rows", "cols"))
    rgb_slice = rgb[np.ix_(frames, rows, cols)].astype(np.int32)
    # The tolerance of the embedded golden test: thread counts change the summation order.
    assert np.abs(rgb_slice - np.array(golden["rgb"])).max() <= 3
