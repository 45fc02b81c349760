"""TrainerService over a real gRPC channel (loopback), in-process bus, local object store:
submit (validation, idempotency, the requested event), get, list (newest first, paging,
state filter), cancel (queued / running / finished), watch (a stream of changes), and
records that survive a new servicer on the same store."""

import contextlib
import threading
import time

import grpc
import pytest
from k4d.bus import InProcessBus
from k4d.bus.topics import TRAIN_EVENTS, TRAIN_REQUESTED
from k4d.config import Config
from k4d.grpc_client import field_violations
from k4d.grpc_server import create_server
from k4d.store import LocalStore
from k4d_trainer.control import jobs
from k4d_trainer.control.api import TrainerServicer
from k4d_trainer.control.records import JobRecords, cancel_key
from k4d_trainer.control.server import SERVICE_NAME, register_service
from kinema4d.v1 import common_pb2, events_pb2, trainer_pb2, trainer_pb2_grpc

T = trainer_pb2.TrainingState


def make_spec(**overrides) -> trainer_pb2.TrainingJobSpec:
    fields = dict(base_model=common_pb2.ModelRef(name="wan2.1-i2v-14b"),
                  dataset_uri="s3://k4d/datasets/demo", output_model_name="kinema4d-demo",
                  variant="act", num_steps=4, learning_rate=2e-5, world_size=2, sharding="ddp")
    fields.update(overrides)
    return trainer_pb2.TrainingJobSpec(**fields)


class _Recorder:
    """Everything published on one topic of the in-process bus."""

    def __init__(self, bus, topic):
        self.consumer = bus.consumer([topic], f"test-{topic}")

    def take(self, count=1, timeout_s=5.0):
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            out += self.consumer.poll(0.05, max_records=10)
        return out


@contextlib.contextmanager
def serving(servicer):
    """`servicer` on a loopback gRPC server with the runtime's interceptors -> its stub."""
    def register(server, config):
        trainer_pb2_grpc.add_TrainerServiceServicer_to_server(servicer, server)
        return [SERVICE_NAME]

    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0), [register])
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield trainer_pb2_grpc.TrainerServiceStub(channel)
    finally:
        server.stop(0)


@pytest.fixture
def service(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    requested, events = _Recorder(bus, TRAIN_REQUESTED), _Recorder(bus, TRAIN_EVENTS)
    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0),
                                 [lambda s, c: register_service(s, c, bus=bus, store=store)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield trainer_pb2_grpc.TrainerServiceStub(channel), store, requested, events
    channel.close()
    server.stop(0)


def test_submit_records_and_publishes_the_request(service):
    stub, store, requested, _ = service
    job = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=make_spec())).job
    assert jobs.is_job_id(job.job_id) and job.state == T.TRAINING_STATE_QUEUED
    assert job.total_steps == 4 and job.run_uri == store.uri_for(f"trainer/runs/{job.job_id}")
    assert job.created_at.seconds > 0
    [message] = requested.take()
    event = events_pb2.TrainingRequested.FromString(message.value)
    assert event.header.job_id == job.job_id == message.job_id
    assert event.spec == make_spec()
    got = stub.GetTrainingJob(trainer_pb2.GetTrainingJobRequest(job_id=job.job_id)).job
    assert got == job
    # Durable: a new servicer on the same store (a restarted trainer) knows the job.
    assert JobRecords(store).get(job.job_id) == job


def test_idempotency_key_returns_the_same_job(service):
    stub, _, requested, _ = service
    request = trainer_pb2.SubmitTrainingJobRequest(spec=make_spec(), idempotency_key="run-42")
    first = stub.SubmitTrainingJob(request)
    second = stub.SubmitTrainingJob(request)
    assert not first.deduplicated and second.deduplicated
    assert second.job.job_id == first.job.job_id
    assert len(requested.take(2, timeout_s=1.0)) == 1
    other = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(
        spec=make_spec(), idempotency_key="run-43"))
    assert other.job.job_id != first.job.job_id


@pytest.mark.parametrize("spec,key,fields", [
    (make_spec(dataset_uri=""), "", {"spec.dataset_uri"}),
    (make_spec(dataset_uri="http://x/y", learning_rate=-1.0, sharding="zero3"), "",
     {"spec.dataset_uri", "spec.learning_rate", "spec.sharding"}),
    (make_spec(learning_rate=float("nan"), lora_alpha=float("inf")), "",
     {"spec.learning_rate", "spec.lora_alpha"}),
    (make_spec(output_model_name="../etc", variant="big", recipe="magic"), "",
     {"spec.output_model_name", "spec.variant", "spec.recipe"}),
    (make_spec(base_model=common_pb2.ModelRef()), "", {"spec.base_model"}),
    (make_spec(recipe_json="[1, 2]"), "", {"spec.recipe_json"}),
    (make_spec(recipe_json="{nope"), "", {"spec.recipe_json"}),
    (make_spec(world_size=100000, num_steps=10**9), "", {"spec.world_size", "spec.num_steps"}),
    (make_spec(), "k" * 257, {"idempotency_key"}),
])
def test_bad_submissions_name_every_bad_field(service, spec, key, fields):
    stub, _, requested, _ = service
    with pytest.raises(grpc.RpcError) as err:
        stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=spec, idempotency_key=key))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert {v.field for v in field_violations(err.value)} >= fields
    assert not requested.take(1, timeout_s=0.2)


def test_get_and_cancel_unknown_or_malformed_ids(service):
    stub = service[0]
    for call, request_type in ((stub.GetTrainingJob, trainer_pb2.GetTrainingJobRequest),
                               (stub.CancelTrainingJob, trainer_pb2.CancelTrainingJobRequest)):
        with pytest.raises(grpc.RpcError) as err:
            call(request_type(job_id="train-00000000000-000000000000"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        for bad in ("../../etc/passwd", "x" * 1000):
            with pytest.raises(grpc.RpcError) as err:
                call(request_type(job_id=bad))
            assert err.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
        with pytest.raises(grpc.RpcError) as err:
            call(request_type(job_id=""))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_list_newest_first_with_paging_and_state_filter(service):
    stub, store, _, _ = service
    ids = [stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=make_spec())).job.job_id
           for _ in range(5)]
    stub.CancelTrainingJob(trainer_pb2.CancelTrainingJobRequest(job_id=ids[1]))
    seen, token = [], ""
    while True:
        page = stub.ListTrainingJobs(trainer_pb2.ListTrainingJobsRequest(page_size=2, page_token=token))
        seen += [j.job_id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids[::-1]
    cancelled = stub.ListTrainingJobs(trainer_pb2.ListTrainingJobsRequest(
        state=T.TRAINING_STATE_CANCELLED)).jobs
    assert [j.job_id for j in cancelled] == [ids[1]]
    for bad in (trainer_pb2.ListTrainingJobsRequest(page_size=501),
                trainer_pb2.ListTrainingJobsRequest(page_token="not-a-token"),
                trainer_pb2.ListTrainingJobsRequest(state=42)):
        with pytest.raises(grpc.RpcError) as err:
            stub.ListTrainingJobs(bad)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_cancel_a_queued_job_finishes_it_and_says_so_on_the_bus(service):
    stub, store, _, events = service
    job = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=make_spec())).job
    cancelled = stub.CancelTrainingJob(trainer_pb2.CancelTrainingJobRequest(job_id=job.job_id)).job
    assert cancelled.state == T.TRAINING_STATE_CANCELLED and cancelled.error.code == "CANCELLED"
    assert store.exists(cancel_key(job.job_id))  # the worker will not start it
    [message] = events.take()
    assert events_pb2.TrainingEvent.FromString(message.value).state == T.TRAINING_STATE_CANCELLED
    again = stub.CancelTrainingJob(trainer_pb2.CancelTrainingJobRequest(job_id=job.job_id)).job
    assert again == cancelled


def test_cancel_a_running_job_records_the_request(service):
    stub, store, _, _ = service
    job = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=make_spec())).job
    JobRecords(store).update(job.job_id, lambda j: jobs.advance(j, T.TRAINING_STATE_RUNNING))
    out = stub.CancelTrainingJob(trainer_pb2.CancelTrainingJobRequest(job_id=job.job_id)).job
    assert out.state == T.TRAINING_STATE_RUNNING and out.cancel_requested
    assert store.exists(cancel_key(job.job_id))
    # A finished job is not touched by a cancel.
    JobRecords(store).update(job.job_id, lambda j: jobs.apply_status(
        j, {"state": "succeeded", "step": 4, "loss": 0.5}))
    done = stub.CancelTrainingJob(trainer_pb2.CancelTrainingJobRequest(job_id=job.job_id)).job
    assert done.state == T.TRAINING_STATE_SUCCEEDED and not done.cancel_requested


def test_watch_streams_every_change_until_finished(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    records = JobRecords(store)
    updates = [{"state": "running", "step": 1, "total_steps": 4, "loss": 2.0},
               {"state": "running", "step": 3, "total_steps": 4, "loss": 1.0},
               {"state": "succeeded", "step": 4, "total_steps": 4, "loss": 0.5,
                "published_model": {"name": "kinema4d-demo", "version": "1"}}]
    with serving(TrainerServicer(bus, store, watch_poll_s=0.02)) as stub:
        job = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=make_spec())).job
        stream = stub.WatchTrainingJob(trainer_pb2.WatchTrainingJobRequest(job_id=job.job_id),
                                       timeout=20)
        assert next(stream).job.state == T.TRAINING_STATE_QUEUED
        # Watch polls the record: it streams the latest state, so each change is written
        # once the previous one has arrived (a fixed-interval writer skipped states under load).
        rest = []
        for status in updates:
            records.update(job.job_id, lambda j, s=status: jobs.apply_status(j, s))
            rest.append(next(stream).job)
        assert list(stream) == []  # ends by itself at the terminal state
    assert [j.step for j in rest] == [1, 3, 4]
    assert rest[-1].state == T.TRAINING_STATE_SUCCEEDED and rest[-1].loss == 0.5
    assert rest[-1].published_model == common_pb2.ModelRef(name="kinema4d-demo", version="1")


def test_submit_when_the_bus_is_down_is_unavailable_and_the_job_failed(tmp_path):
    class BrokenBus(InProcessBus):
        def _send(self, *args):
            raise ConnectionError("broker down")

    with serving(TrainerServicer(BrokenBus(), LocalStore(tmp_path / "store"))) as stub:
        with pytest.raises(grpc.RpcError) as err:
            stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=make_spec()))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        [job] = stub.ListTrainingJobs(trainer_pb2.ListTrainingJobsRequest()).jobs
    assert job.state == T.TRAINING_STATE_FAILED and job.error.code == "UNAVAILABLE"


def test_concurrent_submits_with_one_key_on_two_replicas_make_one_job(tmp_path):
    store = LocalStore(tmp_path / "store")
    replicas = [TrainerServicer(InProcessBus(), store) for _ in range(2)]
    request = trainer_pb2.SubmitTrainingJobRequest(spec=make_spec(), idempotency_key="race")
    results, barrier = [], threading.Barrier(8)

    def submit(servicer):
        barrier.wait()
        results.append(servicer.SubmitTrainingJob(request, None))

    threads = [threading.Thread(target=submit, args=(replicas[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.job.job_id for r in results}) == 1
    assert sorted(r.deduplicated for r in results) == [False] + [True] * 7
    assert JobRecords(store).job_ids() == [results[0].job.job_id]


def test_the_control_plane_never_imports_torch():
    """The trainer Deployment is small (500m CPU, 1 GiB) and starts fast: serving and
    following jobs, validation included, must not load torch or the model libraries."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import k4d_trainer.control.server, k4d_trainer.control.worker\n"
            "from k4d_trainer.control.spec import validate_spec\n"
            "from kinema4d.v1 import common_pb2, trainer_pb2\n"
            "validate_spec(trainer_pb2.TrainingJobSpec(base_model=common_pb2.ModelRef(name='b'),"
            " dataset_uri='s3://k4d/d', output_model_name='m'))\n"
            "print(sorted(m for m in ('torch', 'diffusers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
