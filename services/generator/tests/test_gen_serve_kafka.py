"""`k4d serve generator --worker` as a real subprocess against the real broker and S3 server:
one model per process (one load, shared by a gRPC Generate and a pipeline job), readiness
= loaded and warmed, and `k4d generate publish` announcing a version that both switch to;
the queue / compute metrics are read back from the process's /metrics."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

import grpc
import numpy as np
import pytest
from k4d.bus import event_headers
from k4d.bus.topics import SIM_COMPLETED, SIM_PROJECTED
from k4d.cli.main import main
from k4d.grpc_client import wait_healthy
from k4d.local_servers import free_port
from k4d.tensor_io import to_tensor
from k4d.testing.bus import drain
from k4d.testing.events import projection_event
from k4d.testing.pytest_plugin import TEST_MAX_POLL_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS
from k4d_generator.server import SERVICE_NAME
from k4d_model import registry
from kinema4d.v1 import common_pb2, events_pb2, generator_pb2, generator_pb2_grpc, simulator_pb2

pytestmark = pytest.mark.integration


def _env(kafka_broker, s3_server, s3_store, tmp_path, **extra) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "K4D_KAFKA_BOOTSTRAP": kafka_broker, "K4D_STORE_URI": f"s3://{s3_store.bucket}",
        "K4D_S3_ENDPOINT": s3_server.endpoint, "K4D_S3_ACCESS_KEY": s3_server.access_key,
        "K4D_S3_SECRET_KEY": s3_server.secret_key, "K4D_S3_REGION": s3_server.region,
        "K4D_S3_SECURE": "0", "K4D_KAFKA_SESSION_TIMEOUT_MS": str(TEST_SESSION_TIMEOUT_MS),
        # A job takes seconds on a loaded CI machine: more than the test-sized interval.
        "K4D_KAFKA_MAX_POLL_INTERVAL_MS": str(5 * TEST_MAX_POLL_INTERVAL_MS),
        "K4D_WORKER_BACKOFF_S": "0.05", "K4D_SHUTDOWN_GRACE_S": "3",
        "K4D_GENERATOR_CACHE_DIR": str(tmp_path / "cache")})
    env.update(extra)
    return env


def _metric(metrics_port: int, name: str, **labels) -> float:
    """The value of one sample on the process's /metrics page (0 when absent)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    wanted = {f'{k}="{v}"' for k, v in labels.items()}
    for line in text.decode().splitlines():
        match = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if match and wanted <= set(match.group(1).split(",")):
            return float(match.group(2))
    return 0.0


def _data(array):
    return common_pb2.TensorData(inline=to_tensor(np.ascontiguousarray(array)))


def _generate(stub, make_robot, seed) -> generator_pb2.GenerateResult:
    image, robot = make_robot()
    request = generator_pb2.GenerateRequest(
        image=_data(image), robot_rgb=_data(robot["robot_rgb"]),
        robot_pointmap=_data(robot["robot_pointmap"]), robot_mask=_data(robot["robot_mask"]),
        model=common_pb2.ModelRef(name="tiny"),
        sampling=generator_pb2.SamplingParams(num_steps=2, seed=seed))
    return list(stub.Generate(request, timeout=120))[-1].result


def _job(bus, store, job_id, make_robot) -> simulator_pb2.SimulationResult:
    """One pipeline job through k4d.sim.projected -> the process -> k4d.sim.completed."""
    image, _ = make_robot()
    spec = simulator_pb2.SimulationSpec(
        initial_image=common_pb2.TensorData(inline=to_tensor(image)),
        model=common_pb2.ModelRef(name="tiny"),
        sampling=generator_pb2.SamplingParams(num_steps=2, seed=3), num_frames=5)
    event = projection_event(store, job_id, make_robot, spec)
    event.header.created_at.GetCurrentTime()
    bus.publish(SIM_PROJECTED, job_id, event.SerializeToString(), event_headers(job_id))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for message in drain(bus, SIM_COMPLETED, 100, timeout_s=3):
            if message.job_id == job_id:
                return events_pb2.SimulationCompleted.FromString(message.value).result
    raise AssertionError(f"{job_id} never completed")


def _served_version(stub) -> str:
    loaded = [m for m in stub.ListModels(generator_pb2.ListModelsRequest()).models if m.loaded]
    return loaded[0].version if loaded else ""


def test_gen_serve_worker_one_model_shared_and_switched_by_publish(
        kafka_broker, s3_server, s3_store, kafka_bus, tmp_path, tiny_model_dir, make_robot,
        monkeypatch, capsys):
    registry.publish(s3_store, tiny_model_dir, "tiny", "1")
    port, metrics_port = free_port(), free_port()
    env = _env(kafka_broker, s3_server, s3_store, tmp_path, K4D_GENERATOR_MODEL="registry:tiny")
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "k4d.cli.serve", "generator", "--worker", "--host",
             "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port)],
            env=env, stdout=log, stderr=subprocess.STDOUT)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        assert wait_healthy(f"127.0.0.1:{port}", SERVICE_NAME, timeout_s=120,
                            should_abort=lambda: proc.poll() is not None), log_path.read_text()
        loads = {"name": "k4d_generator_model_loads_total", "backend": "torch", "outcome": "ok"}
        # ready = loaded and warmed: the start-up load is done, once
        assert _metric(metrics_port, **loads) == 1
        stub = generator_pb2_grpc.GeneratorServiceStub(channel)

        # a gRPC Generate and a pipeline job use the same, one model
        assert _generate(stub, make_robot, seed=1).model.version == "1"
        assert _job(kafka_bus, s3_store, "job-a", make_robot).model.version == "1"
        assert _metric(metrics_port, **loads) == 1, log_path.read_text()

        # `k4d generate publish` announces version 2 on the real broker; both sides switch
        for var in ("K4D_KAFKA_BOOTSTRAP", "K4D_STORE_URI", "K4D_S3_ENDPOINT",
                    "K4D_S3_ACCESS_KEY", "K4D_S3_SECRET_KEY", "K4D_S3_REGION", "K4D_S3_SECURE"):
            monkeypatch.setenv(var, env[var])
        assert main(["generate", "publish", "--model", str(tiny_model_dir), "--name", "tiny",
                     "--version", "2"]) == 0
        assert '"announced": true' in capsys.readouterr().out
        deadline = time.monotonic() + 90
        while _served_version(stub) != "2":
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        assert _metric(metrics_port, **loads) == 2
        assert _generate(stub, make_robot, seed=2).model.version == "2"
        assert _job(kafka_bus, s3_store, "job-b", make_robot).model.version == "2"
        assert _metric(metrics_port, **loads) == 2

        # queue and compute time apart, per RPC and per stage
        generate = "/kinema4d.v1.GeneratorService/Generate"
        for kind in ("queue", "compute"):
            assert _metric(metrics_port, f"k4d_grpc_{kind}_seconds_count", method=generate) == 2
            # >= : a job slower than the poll interval is redelivered (and counted again)
            assert _metric(metrics_port, f"k4d_stage_{kind}_seconds_count",
                           topic=SIM_PROJECTED) >= 2
        assert _metric(metrics_port, "k4d_grpc_compute_seconds_sum", method=generate) > 0
        assert _metric(metrics_port, "k4d_stage_queue_seconds_sum", topic=SIM_PROJECTED) > 0
    finally:
        channel.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log_path.read_text()[-3000:]
