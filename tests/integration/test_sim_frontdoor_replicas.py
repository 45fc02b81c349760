"""Two simulator front-door replicas (`register_service`, each with its own bus and store
clients, as two pods would have) on one real Kafka-protocol broker and one real S3 server:

- the same idempotency key sent to both at once makes one job;
- a replica restarted in the middle of its replay is NOT_SERVING until it has caught up,
  and once SERVING it answers every known job correctly (never NOT_FOUND);
- a job whose events have expired from the topics (a fresh broker: every record gone) is
  still listed, from its durable record in the object store;
- stage outcomes (IK failed frames, per-stage seconds, warnings) reach the result.

The module runs its own broker (like test_sim_feed_kafka.py): on the session broker the
e2e cluster's stage workers would consume these hand-made requests and answer them.
S3 is the session's moto server (`cluster_config`, a fresh bucket per test).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from k4d import local_servers
from k4d.bus import event_headers
from k4d.bus.kafka import KafkaBus
from k4d.grpc_server import create_server, run_shutdown_callbacks
from k4d_embedded.testing.localcluster import example_spec
from k4d_simulator import events as ev
from k4d_simulator.server import SERVICE_NAME, register_service
from kinema4d.v1 import common_pb2, events_pb2, generator_pb2, simulator_pb2, simulator_pb2_grpc

pytestmark = pytest.mark.integration
S = simulator_pb2.JobState
SERVING = health_pb2.HealthCheckResponse.SERVING
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "panda_pick"


def make_spec():
    """The shipped example at the tiny clip size, static-world (no stage runs here)."""
    return example_spec(EXAMPLE, None)


@pytest.fixture
def broker(tmp_path):
    process = local_servers.start_broker(log_dir=tmp_path / "broker")
    yield process
    process.stop()


class Replica:
    """One front-door process as `k4d serve simulator` builds it (server + register_service),
    in this test process."""

    def __init__(self, config):
        self.server, port = create_server(config, [register_service])
        self.server.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = simulator_pb2_grpc.SimulatorServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def serving(self) -> bool:
        status = self.health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME)).status
        return status == SERVING

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        assert _wait(self.serving, timeout_s), "replica never became SERVING"

    def stop(self) -> None:
        run_shutdown_callbacks(self.server)  # what `serve` does on SIGTERM
        self.server.stop(0)
        self.channel.close()


def _wait(predicate, timeout_s=30.0, interval_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return False


def _config(cluster_config, broker_process):
    return dataclasses.replace(cluster_config, kafka_bootstrap=broker_process.address)


def _bus(broker_process) -> KafkaBus:
    return KafkaBus(broker_process.address, client_id="k4d-stage-stand-in")


def publish_outcome(bus, job_id: str, *, outcome: str = "completed", failed_frames: int = 0):
    """The events the three stage workers publish for one job (the event contract)."""
    h = lambda stage: ev.header(job_id, stage)  # noqa: E731
    bus.publish(ev.TOPIC_KINEMATICS, job_id, events_pb2.KinematicsCompleted(
        header=h("kinematics"), failed_frames=failed_frames, seconds=0.25,
        spec=simulator_pb2.SimulationSpec(num_frames=3)).SerializeToString(),
        event_headers(job_id))
    if outcome == "failed":
        bus.publish(ev.TOPIC_FAILED, job_id, events_pb2.SimulationFailed(
            header=h("projection"), error=common_pb2.ErrorInfo(
                code="INVALID_ARGUMENT", stage="projection", message="bad camera"))
            .SerializeToString(), event_headers(job_id))
        return
    bus.publish(ev.TOPIC_PROJECTED, job_id, events_pb2.ProjectionCompleted(
        header=h("projection"), stage_seconds={"kinematics": 0.25, "projection": 0.5})
        .SerializeToString(), event_headers(job_id))
    result = simulator_pb2.SimulationResult(
        rgb_video_uri=f"s3://elsewhere/jobs/{job_id}/generation/rgb.mp4",
        model=generator_pb2.ModelInfo(name="static-world", variant="static-world"),
        stage_seconds={"kinematics": 0.25, "projection": 0.5, "generation": 1.5})
    bus.publish(ev.TOPIC_COMPLETED, job_id, events_pb2.SimulationCompleted(
        header=h("generation"), result=result).SerializeToString(), event_headers(job_id))


def test_one_idempotency_key_sent_to_two_replicas_at_once_makes_one_job(cluster_config, broker):
    config = _config(cluster_config, broker)
    replicas = [Replica(config), Replica(config)]
    try:
        for replica in replicas:
            replica.wait_ready()
        spec = make_spec()
        for round_ in range(4):
            key = f"client-retry-{round_}"
            barrier = threading.Barrier(8)
            answers: list = [None] * 8

            def submit(i: int, key: str, barrier: threading.Barrier, answers: list) -> None:
                barrier.wait()
                answers[i] = replicas[i % 2].stub.Submit(
                    simulator_pb2.SubmitRequest(spec=spec, idempotency_key=key))

            threads = [threading.Thread(target=submit, args=(i, key, barrier, answers))
                       for i in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            job_ids = {a.job_id for a in answers}
            assert len(job_ids) == 1, f"round {round_}: one key made jobs {job_ids}"
            assert sum(not a.deduplicated for a in answers) == 1
            # Both replicas know the job at once, whichever of them created it.
            for replica in replicas:
                job = replica.stub.Get(simulator_pb2.GetRequest(job_id=answers[0].job_id)).job
                assert job.state == S.JOB_STATE_QUEUED
        for replica in replicas:
            assert _wait(lambda r=replica: len(r.stub.ListJobs(
                simulator_pb2.ListJobsRequest(page_size=100)).jobs) == 4)
            time.sleep(0.5)  # no late duplicate shows up either
            assert len(replica.stub.ListJobs(simulator_pb2.ListJobsRequest(page_size=100)).jobs) == 4
    finally:
        for replica in replicas:
            replica.stop()


def test_replica_restarted_mid_replay_answers_correctly_once_ready(cluster_config, broker):
    config = _config(cluster_config, broker)
    first = Replica(config)
    bus = _bus(broker)
    expected: dict[str, int] = {}
    try:
        first.wait_ready()
        spec = make_spec()
        for i in range(6):
            job_id = first.stub.Submit(simulator_pb2.SubmitRequest(spec=spec)).job_id
            if i % 3 == 0:
                publish_outcome(bus, job_id)
                expected[job_id] = S.JOB_STATE_SUCCEEDED
            elif i % 3 == 1:
                publish_outcome(bus, job_id, outcome="failed")
                expected[job_id] = S.JOB_STATE_FAILED
            else:
                expected[job_id] = S.JOB_STATE_QUEUED
        # A long history ahead of the restart: the replay takes a while.
        filler = "history-" + str(time.monotonic_ns())
        progress = events_pb2.SimulationProgress(
            header=ev.header(filler, "generation"),
            progress=common_pb2.Progress(stage="generation", step=1, total=2))
        for _ in range(3000):
            bus.publish(ev.TOPIC_PROGRESS, filler, progress.SerializeToString(),
                        event_headers(filler))
        for job_id, state in expected.items():
            assert _wait(lambda j=job_id, s=state: first.stub.Get(
                simulator_pb2.GetRequest(job_id=j)).job.state == s)
    finally:
        first.stop()

    second = Replica(config)
    time.sleep(0.3)
    second.stop()  # killed in the middle of its replay
    restarted = Replica(config)
    try:
        saw_not_serving, checks = False, 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not restarted.serving():
                saw_not_serving = True
                time.sleep(0.02)
                continue
            for job_id, state in expected.items():  # never NOT_FOUND once SERVING
                job = restarted.stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job
                assert job.state == state, (job_id, S.Name(job.state), S.Name(state))
            checks += 1
            if checks >= 3:
                break
        assert checks >= 3, "the restarted replica never became SERVING"
        assert saw_not_serving, "SERVING before the replay of 3000+ events could finish"
        done = restarted.stub.Get(simulator_pb2.GetRequest(
            job_id=next(j for j, s in expected.items() if s == S.JOB_STATE_SUCCEEDED))).job
        assert [o.stage for o in done.result.stages] == ["kinematics", "projection", "generation"]
    finally:
        restarted.stop()


def test_job_older_than_topic_retention_is_still_listed(cluster_config, tmp_path):
    old_broker = local_servers.start_broker(log_dir=tmp_path / "old-broker")
    try:
        config = _config(cluster_config, old_broker)
        replica = Replica(config)
        bus = _bus(old_broker)
        try:
            replica.wait_ready()
            done = replica.stub.Submit(simulator_pb2.SubmitRequest(
                spec=make_spec(), idempotency_key="old-key")).job_id
            waiting = replica.stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
            publish_outcome(bus, done, failed_frames=2)
            assert _wait(lambda: replica.stub.Get(simulator_pb2.GetRequest(
                job_id=done)).job.state == S.JOB_STATE_SUCCEEDED)
            before = replica.stub.Get(simulator_pb2.GetRequest(job_id=done)).job
        finally:
            bus.close()
            replica.stop()
    finally:
        old_broker.stop()

    # Retention expired: a broker without a single record of these jobs, same bucket.
    new_broker = local_servers.start_broker(log_dir=tmp_path / "new-broker")
    replica = Replica(_config(cluster_config, new_broker))
    try:
        replica.wait_ready()
        listed = {j.job_id: j for j in replica.stub.ListJobs(
            simulator_pb2.ListJobsRequest(page_size=100)).jobs}
        assert set(listed) == {done, waiting}
        assert listed[waiting].state == S.JOB_STATE_QUEUED
        after = listed[done]
        assert after.state == S.JOB_STATE_SUCCEEDED
        assert after.result.rgb_video_uri == before.result.rgb_video_uri
        assert after.created_at == before.created_at
        kinematics = after.result.stages[0]
        assert (kinematics.stage, kinematics.failed_frames) == ("kinematics", 2)
        assert replica.stub.Get(simulator_pb2.GetRequest(job_id=done)).job.state == \
            S.JOB_STATE_SUCCEEDED
        # the idempotency key outlives the topics too (within its 24 h window)
        again = replica.stub.Submit(simulator_pb2.SubmitRequest(
            spec=make_spec(), idempotency_key="old-key"))
        assert (again.job_id, again.deduplicated) == (done, True)
    finally:
        replica.stop()
        new_broker.stop()


def test_shutdown_stops_the_feed(cluster_config, broker):
    """What `serve` does on SIGTERM (the shutdown callbacks) stops the replica's feed."""

    def feeds() -> int:
        return sum(t.name == "job-feed" and t.is_alive() for t in threading.enumerate())

    before = feeds()
    config = _config(cluster_config, broker)
    for _ in range(2):
        replica = Replica(config)
        replica.wait_ready()
        assert feeds() == before + 1
        replica.stop()
        assert _wait(lambda: feeds() == before, 10), "the job feed outlived its server"


def test_serve_simulator_process_stops_cleanly_on_sigterm(broker, s3_server, tmp_path):
    """`k4d serve simulator` as the image runs it: ready once caught up, and SIGTERM ends
    the process with exit code 0 within the grace (the feed and clients closed)."""
    from k4d_embedded.testing.localcluster import Cluster

    cluster = Cluster(broker.address, s3_server, tmp_path / "logs", model_dir=None)
    cluster.start("simulator", worker=False, timeout_s=60)  # waits for SimulatorService
    process = cluster.processes["simulator"]
    started = time.monotonic()
    assert process.stop(grace_s=30) == 0, process.log_tail(40)
    assert time.monotonic() - started < 25
    log = process.log_tail(200)
    assert "job feed caught up" in log and "Traceback" not in log, log
