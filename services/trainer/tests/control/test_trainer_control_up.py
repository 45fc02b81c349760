"""Issue 11's "Done when", end to end under `k4d up` (real broker, real S3 server, the
services as their own processes): a generator serves version 0 of a registry model; a
training job submitted to the trainer service runs `k4d train` with 2 processes (FSDP2)
on a dataset in S3, publishes version <job id> of the same model and announces it on
k4d.model.published; the running generator switches to it from the event. TLS and tokens
are on (k4d up's default): LoadModel and the trainer take the operator's token."""

import json
import subprocess
import sys
import time

import pytest
from k4d.grpc_client import create_channel
from kinema4d.v1 import common_pb2, generator_pb2, generator_pb2_grpc, trainer_pb2, trainer_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "e2e-demo"


def _k4d(*args, env, timeout=300):
    done = subprocess.run([sys.executable, "-m", "k4d.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def cluster(tmp_path):
    """`k4d up` with the generator and the trainer -> UpCluster."""
    from k4d.testing.processes import k4d_up

    with k4d_up(["generator", "trainer"], tmp_path / "logs") as up:
        yield up


def test_a_trained_model_is_served_by_the_running_generator(cluster, tmp_path):
    from k4d.config import load_config
    from k4d.episodes import DatasetWriter
    from k4d_trainer.synthetic import synthetic_episode

    addresses, env, operator = cluster.addresses, cluster.client_env, cluster.operator()
    v0 = tmp_path / "v0"
    _k4d("generate", "init-model", "--config", "tiny", "--out", str(v0), env=env)
    _k4d("generate", "publish", "--model", str(v0), "--name", MODEL, "--version", "0", env=env)
    dataset = "s3://k4d/datasets/e2e"
    writer = DatasetWriter(dataset, config=load_config(env=env))
    for i in range(2):
        writer.write_episode(*synthetic_episode(i))
    writer.close()

    with create_channel(addresses["generator"], security=operator) as g_channel, \
            create_channel(addresses["trainer"], security=operator) as t_channel:
        generator = generator_pb2_grpc.GeneratorServiceStub(g_channel)
        generator.LoadModel(generator_pb2.LoadModelRequest(
            model=common_pb2.ModelRef(name=MODEL, version="0"), backend="torch"), timeout=300)
        trainer = trainer_pb2_grpc.TrainerServiceStub(t_channel)
        recipe = {"model": {"size": "tiny", "activation_checkpointing": False},
                  "training": {"global_batch_size": 2, "lr": 1e-3, "warmup_steps": 1},
                  "vae": {"steps": 1}, "observability": {"tensorboard": False}}
        job = trainer.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(
            spec=trainer_pb2.TrainingJobSpec(
                recipe="from-scratch", dataset_uri=dataset, output_model_name=MODEL,
                num_steps=2, world_size=2, sharding="fsdp2", recipe_json=json.dumps(recipe))),
            timeout=30).job
        final = [w.job for w in trainer.WatchTrainingJob(
            trainer_pb2.WatchTrainingJobRequest(job_id=job.job_id), timeout=600)][-1]
        assert final.state == trainer_pb2.TRAINING_STATE_SUCCEEDED, final
        assert (final.published_model.name, final.published_model.version) == (MODEL, job.job_id)

        deadline, info = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            info = generator.GetModelInfo(generator_pb2.GetModelInfoRequest(
                model=common_pb2.ModelRef(name=MODEL, version=job.job_id)), timeout=30).model
            if info.loaded:
                break
            time.sleep(1)
        assert info is not None and info.loaded and info.version == job.job_id, info
