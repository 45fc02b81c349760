"""The e2e cluster: a real Kafka-protocol broker, a real S3 server (runtime fixtures) and
every service as a subprocess (`k4d serve <name> [--worker]`), configured only by env.

Jobs are the shipped Panda example shrunk to the `tiny` generator's native clip
(5 frames at 32x48: --downscale 15) so the suite stays fast on a 2-core CPU box.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from k4d_embedded.testing.localcluster import STAGE_SERVICES, Cluster, run_k4d


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A `tiny` generator checkpoint made by the generator package's own command."""
    out = tmp_path_factory.mktemp("tiny-model") / "tiny"
    run_k4d("generate", "init-model", "--config", "tiny", "--out", str(out))
    assert (out / "k4d_model.json").is_file()
    return out


@pytest.fixture(scope="session")
def cluster(kafka_broker, s3_server, tiny_model, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("e2e-logs")
    cluster = Cluster(kafka_broker, s3_server, log_dir, tiny_model)
    try:
        for name in STAGE_SERVICES:
            cluster.start(name)
        cluster.start("simulator", worker=False)
        yield cluster
    finally:
        cluster.stop_all()

