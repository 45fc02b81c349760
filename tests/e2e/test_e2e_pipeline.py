"""End to end over the real broker, the real S3 server and every service as a process.

Job = the shipped Panda example at the tiny generator's clip (5 frames, 32x48), sampled
with the tiny checkpoint created by `k4d generate init-model`."""

from __future__ import annotations

import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from k4d.bus.kafka import KafkaBus
from k4d.grpc_client import field_violations
from k4d.store import get_array
from k4d.store.s3 import S3Store
from k4d.tensor_io import TensorRef
from k4d_embedded.testing.localcluster import example_spec, wait_terminal
from k4d_simulator import events as ev
from kinema4d.v1 import events_pb2, simulator_pb2, simulator_pb2_grpc

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "panda_pick"


def e2e_spec(model_dir, **kwargs):
    return example_spec(EXAMPLE, model_dir, **kwargs)
S = simulator_pb2.JobState


@pytest.fixture(scope="module")
def stub(cluster):
    channel = cluster.channel()
    yield simulator_pb2_grpc.SimulatorServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def store(cluster):
    s = S3Store(cluster.s3.endpoint, cluster.bucket, access_key=cluster.s3.access_key,
                secret_key=cluster.s3.secret_key, region=cluster.s3.region)
    yield s
    s.close()


def submit(stub, spec, key: str = "") -> str:
    return stub.Submit(simulator_pb2.SubmitRequest(spec=spec, idempotency_key=key)).job_id


def completion_events(cluster, job_ids, settle_s: float = 2.0) -> dict[str, list]:
    """Every SimulationCompleted on the topic for these jobs (read from the beginning)."""
    found: dict[str, list] = {j: [] for j in job_ids}
    with KafkaBus(cluster.broker, client_id="e2e-reader", session_timeout_ms=3000,
                  max_poll_interval_ms=6000) as bus:
        consumer = bus.consumer(ev.TOPIC_COMPLETED, f"e2e-reader-{time.monotonic_ns()}")
        # The group join takes a few seconds; after the first batch, stop once it is quiet.
        deadline, quiet_since = time.monotonic() + 30, None
        while time.monotonic() < deadline and (
                quiet_since is None or time.monotonic() - quiet_since < settle_s):
            messages = consumer.poll(0.5, max_records=200)
            if messages or quiet_since is not None:
                quiet_since = time.monotonic() if messages else quiet_since
            for message in messages:
                event = events_pb2.SimulationCompleted.FromString(message.value)
                if event.header.job_id in found:
                    found[event.header.job_id].append(event)
        consumer.close()
    return found


def check_result(store, job: simulator_pb2.Job) -> None:
    """The result's arrays are in S3, verified by sha256, with the tiny clip's shapes."""
    result = job.result
    rgb = get_array(store, TensorRef.from_proto(result.rgb))
    pointmap = get_array(store, TensorRef.from_proto(result.pointmap))
    mask = get_array(store, TensorRef.from_proto(result.robot_mask))
    assert rgb.shape == (5, 32, 48, 3) and rgb.dtype == np.uint8
    assert pointmap.shape == (5, 32, 48, 3) and np.isfinite(pointmap).all()
    assert mask.shape == (5, 32, 48) and mask.any()
    assert set(result.stage_seconds) >= {"kinematics", "projection", "generation"}
    assert result.model.name or result.model.uri


def test_twenty_concurrent_jobs_complete_with_valid_outputs(cluster, stub, store):
    spec = e2e_spec(cluster.model_dir)
    with ThreadPoolExecutor(8) as pool:
        job_ids = list(pool.map(lambda i: submit(stub, spec), range(20)))
    assert len(set(job_ids)) == 20
    final = wait_terminal(stub, job_ids, timeout_s=240)
    failed = {j: (S.Name(x.state), x.error.message) for j, x in final.items()
              if x.state != S.JOB_STATE_SUCCEEDED}
    assert not failed, f"{failed}\n{cluster.logs()}"
    for job in final.values():
        check_result(store, job)
    url = next(iter(final.values())).result.presigned_urls["rgb"]
    body = urllib.request.urlopen(url, timeout=10).read()
    assert len(body) == 5 * 32 * 48 * 3


def test_stage_worker_sigkilled_mid_job_every_job_completes_exactly_once(cluster, stub, store):
    spec = e2e_spec(cluster.model_dir, steps=6)
    job_ids = [submit(stub, spec) for _ in range(6)]
    watched: dict[str, list[int]] = {j: [] for j in job_ids}

    def watch(job_id):
        for update in stub.Watch(simulator_pb2.WatchRequest(job_id=job_id), timeout=300):
            watched[job_id].append(update.job.state)

    watchers = [threading.Thread(target=watch, args=(j,), daemon=True) for j in job_ids]
    for w in watchers:
        w.start()
    # Kill the generator while it works on the first jobs (progress in "generation").
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = [stub.Get(simulator_pb2.GetRequest(job_id=j)).job for j in job_ids]
        if any(j.progress.stage == "projection" for j in jobs):
            break
        time.sleep(0.05)
    cluster.kill("generator")
    time.sleep(1.0)
    cluster.start("generator")
    final = wait_terminal(stub, job_ids, timeout_s=240)
    for w in watchers:
        w.join(60)
    assert all(x.state == S.JOB_STATE_SUCCEEDED for x in final.values()), \
        f"{[(j, S.Name(x.state), x.error.message) for j, x in final.items()]}\n{cluster.logs()}"
    assert not any(w.is_alive() for w in watchers), f"Watch streams did not end: {watched}"
    for job_id in job_ids:
        assert watched[job_id].count(S.JOB_STATE_SUCCEEDED) == 1, watched[job_id]
    events = completion_events(cluster, job_ids)
    for job_id, completions in events.items():
        assert completions, f"no completion event for {job_id}"
        uris = {(c.result.rgb.uri, c.result.rgb.sha256) for c in completions}
        assert len(uris) == 1, f"redelivered generation wrote different bytes: {uris}"
        check_result(store, final[job_id])


def test_bad_requests_rejected_with_field_violations(cluster, stub):
    spec = e2e_spec(cluster.model_dir)
    spec.ClearField("robot")
    spec.camera.intrinsics.fx = float("nan")
    values = np.frombuffer(spec.actions.values.inline.data, "<f8").copy()
    values[3] = np.inf
    spec.actions.values.inline.data = values.tobytes()
    with pytest.raises(grpc.RpcError) as exc:
        submit(stub, spec)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = {v.field for v in field_violations(exc.value)}
    assert "spec.robot" in fields and "spec.camera.intrinsics.fx" in fields
    assert any(f.startswith("spec.actions.values[") for f in fields)


def test_unknown_robot_fails_in_kinematics_via_the_dead_letter_topic(cluster, stub):
    spec = e2e_spec(cluster.model_dir)
    spec.robot.name = "no-such-robot"
    job_id = submit(stub, spec)
    job = wait_terminal(stub, [job_id], timeout_s=60)[job_id]
    assert job.state == S.JOB_STATE_FAILED
    assert job.error.stage == "kinematics" and job.error.code in ("NOT_FOUND", "INVALID_ARGUMENT")


def test_cancelled_job_stops(cluster, stub):
    queued = submit(stub, e2e_spec(cluster.model_dir))
    stub.Cancel(simulator_pb2.CancelRequest(job_id=queued))
    long_job = submit(stub, e2e_spec(cluster.model_dir, steps=400))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = stub.Get(simulator_pb2.GetRequest(job_id=long_job)).job
        if job.progress.stage == "generation" and job.progress.step >= 1:
            break
        time.sleep(0.05)
    assert job.progress.stage == "generation", job
    stub.Cancel(simulator_pb2.CancelRequest(job_id=long_job))
    final = wait_terminal(stub, [queued, long_job], timeout_s=120)
    for job_id in (queued, long_job):
        assert final[job_id].state == S.JOB_STATE_CANCELLED, final[job_id]
    assert final[long_job].progress.step < 400
    assert not any(completion_events(cluster, [queued, long_job]).values())


def test_restarted_simulator_rebuilds_every_job_by_replay(cluster, stub):
    job_ids = [submit(stub, e2e_spec(cluster.model_dir), key=f"replay-{i}") for i in range(3)]
    before = wait_terminal(stub, job_ids, timeout_s=120)
    listed_before = stub.ListJobs(simulator_pb2.ListJobsRequest(page_size=500)).jobs
    cluster.kill("simulator")
    cluster.start("simulator", worker=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = stub.ListJobs(simulator_pb2.ListJobsRequest(page_size=500)).jobs
        if len(listed) >= len(listed_before) and all(
                stub.Get(simulator_pb2.GetRequest(job_id=j)).job.state == before[j].state
                for j in job_ids if any(x.job_id == j for x in listed)):
            break
        time.sleep(0.2)
    for job_id in job_ids:
        after = stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job
        after.result.presigned_urls.clear()
        expected = simulator_pb2.Job()
        expected.CopyFrom(before[job_id])
        expected.result.presigned_urls.clear()
        assert after == expected
    again = stub.Submit(simulator_pb2.SubmitRequest(spec=e2e_spec(cluster.model_dir),
                                                    idempotency_key="replay-0"))
    assert again.deduplicated and again.job_id == job_ids[0]


def test_no_model_runs_the_labelled_static_world_backend(cluster, stub, store):
    job_id = submit(stub, e2e_spec(None))
    job = wait_terminal(stub, [job_id], timeout_s=120)[job_id]
    assert job.state == S.JOB_STATE_SUCCEEDED, (job.error, cluster.logs())
    assert job.result.model.name == "static-world" or job.result.model.variant == "static-world"
    rgb = get_array(store, TensorRef.from_proto(job.result.rgb))
    mask = get_array(store, TensorRef.from_proto(job.result.robot_mask))
    robot_rgb = get_array(store, TensorRef.from_proto(job.result.robot_rgb))
    np.testing.assert_array_equal(rgb[mask], robot_rgb[mask])  # composited robot


@pytest.mark.slow
def test_projection_worker_killed_twice_under_load(cluster, stub, store):
    """Heavier variant: 12 jobs, the projection worker SIGKILLed twice while they flow."""
    spec = e2e_spec(cluster.model_dir, steps=4)
    job_ids = [submit(stub, spec) for _ in range(12)]
    for _ in range(2):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = [stub.Get(simulator_pb2.GetRequest(job_id=j)).job for j in job_ids]
            if any(j.progress.stage == "kinematics" for j in jobs):
                break
            time.sleep(0.05)
        cluster.kill("projection")
        cluster.start("projection")
    final = wait_terminal(stub, job_ids, timeout_s=400)
    assert all(x.state == S.JOB_STATE_SUCCEEDED for x in final.values()), cluster.logs()
    for job_id, completions in completion_events(cluster, job_ids).items():
        assert len({(c.result.rgb.uri, c.result.rgb.sha256) for c in completions}) == 1
        check_result(store, final[job_id])


def test_poison_message_retried_then_dead_lettered_with_a_failed_event(cluster, stub, store):
    """A ProjectionCompleted whose robot mask fails its sha256 check: the generator retries
    it (K4D_WORKER_MAX_ATTEMPTS=3, backoff), then dead-letters it, and the job fails naming
    the generation stage and the reason."""
    from k4d.bus import event_headers
    from k4d.store import put_array

    job_id = f"sim-poison-{time.monotonic_ns():x}"
    spec = e2e_spec(cluster.model_dir)
    refs = {name: put_array(store, f"jobs/{job_id}/projection/{name}", array).to_proto()
            for name, array in (("rgb", np.zeros((5, 32, 48, 3), np.uint8)),
                                ("pointmap", np.zeros((5, 32, 48, 3), np.float32)),
                                ("mask", np.zeros((5, 32, 48), bool)))}
    refs["mask"].sha256 = "0" * 64  # what a corrupted or tampered object looks like
    event = events_pb2.ProjectionCompleted(header=ev.header(job_id, "projection"), spec=spec,
                                           **refs)
    with KafkaBus(cluster.broker, client_id="e2e-poison") as bus:
        bus.publish(ev.TOPIC_PROJECTED, job_id, event.SerializeToString(), event_headers(job_id))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            job = stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job
        except grpc.RpcError:
            job = None
        if job is not None and job.state == S.JOB_STATE_FAILED:
            break
        time.sleep(0.2)
    assert job is not None and job.state == S.JOB_STATE_FAILED, (job, cluster.logs())
    assert job.error.stage == "generation" and job.error.code == "DATA_LOSS"
    assert "after 3 attempt(s)" in job.error.message and "corrupt" in job.error.message
