"""The trainer's control plane against the real broker (tansu) and the real S3 server (moto):
SubmitTrainingJob -> k4d.train.requested -> the worker launches `k4d train` (2 processes, FSDP2,
torchrun, gloo) on a dataset in S3 -> status.json in S3 -> Watch/Get show the steps, the
loss and the published model, which is in the registry; k4d.train.events carries the
progress. And `k4d up` starts the trainer (server + worker) healthy."""

import json
import subprocess
import sys
import threading

import grpc
import pytest
from k4d.bus.kafka import KafkaBus
from k4d.bus.topics import MODEL_PUBLISHED, TRAIN_EVENTS
from k4d.grpc_server import create_server
from k4d.settings import TrainerSettings
from k4d.store import open_store
from k4d.testing.bus import drain
from k4d_trainer.control.server import register_service
from k4d_trainer.control.worker import TrainerWorker
from kinema4d.v1 import events_pb2, trainer_pb2, trainer_pb2_grpc

pytestmark = pytest.mark.integration
T = trainer_pb2.TrainingState
RUN_TIMEOUT_S = 420


@pytest.fixture
def trainer(cluster_config, tmp_path):
    """TrainerService + its worker on the cluster, as `k4d serve trainer --worker` runs them."""
    bus, store = KafkaBus.from_config(cluster_config), open_store(config=cluster_config)
    server, port = create_server(cluster_config,
                                 [lambda s, c: register_service(s, c, bus=bus, store=store)])
    server.start()
    settings = TrainerSettings(work_dir=tmp_path / "work", poll_s=0.5)
    worker = TrainerWorker(cluster_config, bus, store, settings)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield trainer_pb2_grpc.TrainerServiceStub(channel), bus, store, settings
    stop.set()
    thread.join(60)
    channel.close()
    server.stop(0)
    bus.close()
    store.close()


def write_s3_dataset(uri: str, config, count: int = 2) -> None:
    """The trainer's synthetic episodes, written to S3 through the shared episode writer."""
    from k4d.episodes import DatasetWriter
    from k4d_trainer.synthetic import synthetic_episode

    writer = DatasetWriter(uri, config=config)
    for i in range(count):
        writer.write_episode(*synthetic_episode(i))
    writer.close()


def test_submit_runs_to_succeeded_with_a_published_model(trainer, cluster_config):
    stub, bus, store, settings = trainer
    dataset = f"{cluster_config.store_uri}/datasets/tiny"
    write_s3_dataset(dataset, cluster_config)
    recipe = {"model": {"size": "tiny", "num_frames": 5, "height": 32, "width": 48,
                        "activation_checkpointing": False},
              "training": {"global_batch_size": 2, "lr": 1e-3, "warmup_steps": 1},
              "vae": {"steps": 1}, "checkpoint": {"every": 2},
              "observability": {"tensorboard": False}}
    spec = trainer_pb2.TrainingJobSpec(recipe="from-scratch", dataset_uri=dataset,
                                       output_model_name="tiny-integration", num_steps=2,
                                       world_size=2, sharding="fsdp2", recipe_json=json.dumps(recipe))
    job = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(
        spec=spec, idempotency_key="integration-1"), timeout=30).job
    assert job.run_uri.startswith(cluster_config.store_uri + "/trainer/runs/")

    seen = [w.job for w in stub.WatchTrainingJob(
        trainer_pb2.WatchTrainingJobRequest(job_id=job.job_id), timeout=RUN_TIMEOUT_S)]
    final = seen[-1]
    log = (settings.work_dir / job.job_id / "train.log")
    assert final.state == T.TRAINING_STATE_SUCCEEDED, (final, log.read_text()[-3000:])
    assert T.TRAINING_STATE_RUNNING in [j.state for j in seen]
    got = stub.GetTrainingJob(trainer_pb2.GetTrainingJobRequest(job_id=job.job_id), timeout=30).job
    assert got.step == got.total_steps == 2 and got.loss > 0 and got.launches == 1
    assert got.published_model.name == "tiny-integration"
    assert got.published_model.version == job.job_id  # the run's name: its directory
    assert got.checkpoint_uri.startswith(job.run_uri + "/checkpoints/")
    assert store.exists(f"models/tiny-integration/{job.job_id}/manifest.json")
    # Same key again: the same job, nothing new launched.
    again = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(
        spec=spec, idempotency_key="integration-1"), timeout=30)
    assert again.deduplicated and again.job.job_id == job.job_id

    events = [events_pb2.TrainingEvent.FromString(m.value)
              for m in drain(bus, TRAIN_EVENTS, 50, timeout_s=15) if m.job_id == job.job_id]
    states = [e.state for e in events]
    assert states[0] == T.TRAINING_STATE_RUNNING and states[-1] == T.TRAINING_STATE_SUCCEEDED
    assert states.count(T.TRAINING_STATE_SUCCEEDED) == 1
    assert events[-1].published_model.name == "tiny-integration" and events[-1].step == 2
    # The run announced its model for the generators (k4d.model.published).
    announced = [events_pb2.ModelPublished.FromString(m.value).model
                 for m in drain(bus, MODEL_PUBLISHED, 20, timeout_s=10)]
    assert ("tiny-integration", job.job_id) in [(m.name, m.version) for m in announced]


def test_k4d_up_starts_the_trainer_healthy(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "k4d.cli.main", "up", "--check", "--base-port", "0", "--services",
         "trainer", "--log-dir", str(tmp_path / "logs"), "--timeout", "120"],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("trainer")]
    assert row.split()[-1] == "healthy", result.stdout
    log = (tmp_path / "logs" / "trainer.log").read_text()
    assert "stage worker started" in log  # the Kafka worker ran beside the server
