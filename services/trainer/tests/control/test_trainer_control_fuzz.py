"""Fuzz the trainer's control plane, as the other services are fuzzed: thousands of malformed
requests against a loopback TrainerService (no crash, no hang, only client-error codes,
memory bounded, still serving afterwards), the reflection-driven fuzzer of k4d.testing.fuzz
on every RPC, and hostile `k4d.train.requested` messages through the worker's StageWorker
(each one handled or dead-lettered, the worker alive, no run launched)."""

import json
import random
import resource

import grpc
import pytest
from k4d.bus import InProcessBus, StageWorker, dlq, event_headers
from k4d.bus.topics import TRAIN_REQUESTED
from k4d.config import Config
from k4d.grpc_server import create_server
from k4d.settings import TrainerSettings
from k4d.store import LocalStore
from k4d.testing.fuzz import fuzz_channel
from k4d_trainer.control import jobs
from k4d_trainer.control.server import register_service
from k4d_trainer.control.worker import GROUP_ID, TrainerWorker
from kinema4d.v1 import common_pb2, events_pb2, trainer_pb2, trainer_pb2_grpc

CLIENT_ERRORS = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED}
URIS = ["", "s3://", "s3://k4d/ds", "file:///tmp/ds", "file://relative", "/abs/path", "http://x",
        "s3://k4d/" + "k" * 3000, "file:///" + "\u00e9" * 200, "s3://k4d/a\x00b", "../../etc",
        "s3://k4d/" + "/".join(["..", "x"] * 3)]
NAMES = ["", "kinema4d", "a" * 300, "../x", "m\x00", "ü", "-lead", "ok.name_1", "x" * 100]
NUMBERS = [0.0, -0.0, 1e-5, 2e-5, -1.0, 1.0, 2.0, float("nan"), float("inf"), -float("inf"),
           1e308, 5e-324]
RECIPE_JSON = ["", "{}", "[]", "{", "null", '{"training": {"lr": -1}}', '{"nope": 1}',
               '{"model": {"size": "tiny"}}', '{"a": ' * 5000 + "1" + "}" * 5000,
               json.dumps({"training": {"steps": 10**12}}), '{"x": NaN}', "\x00"]


def random_spec(rng: random.Random) -> trainer_pb2.TrainingJobSpec:
    return trainer_pb2.TrainingJobSpec(
        base_model=common_pb2.ModelRef(name=rng.choice(NAMES), version=rng.choice(NAMES[:4]),
                                       uri=rng.choice(URIS) if rng.random() < 0.3 else ""),
        dataset_uri=rng.choice(URIS), output_model_name=rng.choice(NAMES),
        variant=rng.choice(["", "act", "pmcond", "both", "ACT"]),
        num_steps=rng.choice([0, 1, 5, 10**7, 10**7 + 1, 2**32 - 1]),
        learning_rate=rng.choice(NUMBERS), weight_decay=rng.choice(NUMBERS),
        lora_rank=rng.choice([0, 1, 64, 1024, 1025, 2**32 - 1]), lora_alpha=rng.choice(NUMBERS),
        world_size=rng.choice([0, 1, 2, 1024, 1025, 2**32 - 1]),
        sharding=rng.choice(["", "ddp", "fsdp2", "fsdp", "zero2"]),
        recipe_json=rng.choice(RECIPE_JSON), recipe=rng.choice(["", "finetune-lora",
                                                                "from-scratch", "x"]))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture
def channel(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0),
                                 [lambda s, c: register_service(s, c, bus=bus, store=store)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    channel.close()
    server.stop(0)


def _fuzz(channel, count: int, seed: int) -> dict:
    rng = random.Random(seed)
    stub = trainer_pb2_grpc.TrainerServiceStub(channel)
    submitted: list[str] = []
    codes: dict = {}
    for _ in range(count):
        roll = rng.random()
        try:
            if roll < 0.55:
                response = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(
                    spec=random_spec(rng), idempotency_key=rng.choice(["", "k", "k" * 300])),
                    timeout=10)
                submitted.append(response.job.job_id)
            elif roll < 0.7:
                job_id = rng.choice(submitted + ["", "x" * 500, "train-0-0", "../x",
                                                 jobs.new_job_id()]) if submitted else "nope"
                method = rng.choice([stub.GetTrainingJob, stub.CancelTrainingJob])
                request = (trainer_pb2.GetTrainingJobRequest if method == stub.GetTrainingJob
                           else trainer_pb2.CancelTrainingJobRequest)(job_id=job_id)
                method(request, timeout=10)
            elif roll < 0.85:
                stub.ListTrainingJobs(trainer_pb2.ListTrainingJobsRequest(
                    page_size=rng.choice([0, 1, 3, 500, 501, 2**32 - 1]),
                    page_token=rng.choice(["", "x", "dHJhaW4tMA==", "\x00" * 10]),
                    state=rng.choice([0, 1, 2, 3, 5, 6, 99])), timeout=10)
            else:
                job_id = rng.choice(["", "y" * 300, jobs.new_job_id(), "train-00000000000-zz"])
                list(stub.WatchTrainingJob(trainer_pb2.WatchTrainingJobRequest(job_id=job_id),
                                           timeout=10))
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
            assert code in CLIENT_ERRORS, (code, exc.details())
        codes[code] = codes.get(code, 0) + 1
    return codes


def _assert_still_serving(channel):
    stub = trainer_pb2_grpc.TrainerServiceStub(channel)
    job = stub.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(spec=trainer_pb2.TrainingJobSpec(
        base_model=common_pb2.ModelRef(name="wan2.1-i2v-14b"), dataset_uri="s3://k4d/ds",
        output_model_name="kinema4d-ok")), timeout=10).job
    assert stub.GetTrainingJob(trainer_pb2.GetTrainingJobRequest(job_id=job.job_id),
                               timeout=10).job.state == trainer_pb2.TRAINING_STATE_QUEUED


def test_thousands_of_malformed_requests(channel):
    _fuzz(channel, 200, seed=0)  # warm-up: thread pool, imports
    before = _rss_mib()
    codes = _fuzz(channel, 1500, seed=1)
    grown = _rss_mib() - before
    assert sum(codes.values()) == 1500
    assert codes.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > 500  # the fuzzer does reach checks
    assert codes.get(grpc.StatusCode.OK, 0) > 10  # ... and gets valid requests through
    assert grown < 150, f"peak RSS grew by {grown:.0f} MiB"
    _assert_still_serving(channel)


def test_reflection_fuzz_of_every_rpc(channel):
    report = fuzz_channel(channel, calls_per_method=60, seed=5, deadline_s=10.0)
    assert set(report.codes) == {f"/kinema4d.v1.TrainerService/{m}" for m in (
        "SubmitTrainingJob", "GetTrainingJob", "CancelTrainingJob", "ListTrainingJobs",
        "WatchTrainingJob")}
    report.assert_clean()
    _assert_still_serving(channel)


def _hostile_messages(rng: random.Random, count: int):
    for _ in range(count):
        roll = rng.random()
        job_id = rng.choice(["", "x", "../../etc", "train-0-0", "a" * 400, jobs.new_job_id()])
        if roll < 0.3:
            value = rng.randbytes(rng.randint(0, 200))
        elif roll < 0.4:
            value = b"\x0a" + b"\xff" * 10  # truncated header field
        else:
            value = events_pb2.TrainingRequested(
                header=events_pb2.EventHeader(job_id=job_id), spec=random_spec(rng)).SerializeToString()
        yield value, event_headers(rng.choice([job_id, None]), rng.choice([1, 2, 99]))


def test_worker_survives_hostile_requests_and_launches_nothing(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    settings = TrainerSettings(work_dir=tmp_path / "work", max_restarts=0)
    worker = TrainerWorker(Config(store_uri=store.root.as_uri()), bus, store, settings)
    stage = StageWorker(bus, TRAIN_REQUESTED, GROUP_ID, worker.handle, max_attempts=1)
    bus.ensure_topics([TRAIN_REQUESTED, dlq(TRAIN_REQUESTED)])
    rng = random.Random(7)
    # Hostile values only: every spec that reaches validation has a bad dataset URI, so
    # nothing may be launched.
    messages = [(v, h) for v, h in _hostile_messages(rng, 400)]
    outcomes: dict[str, int] = {}
    with bus.consumer([TRAIN_REQUESTED], GROUP_ID) as consumer:
        for value, headers in messages:
            bus.publish(TRAIN_REQUESTED, None, value, headers)
            (message,) = consumer.poll(1.0)
            spec_ok = True
            try:
                spec_ok = events_pb2.TrainingRequested.FromString(value).spec.dataset_uri in (
                    "s3://k4d/ds", "file:///tmp/ds")
            except Exception:
                spec_ok = False
            if spec_ok:
                continue  # a spec that might be launchable: not this test's subject
            outcome = stage.process(consumer, message, __import__("threading").Event())
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {"ok", "dlq"} and sum(outcomes.values()) > 200
    assert outcomes.get("dlq", 0) > 50 and outcomes.get("ok", 0) > 20
    assert worker.following() == [] and not settings.work_dir.exists()
    failed = [j for j in worker.records.active()]
    assert failed == []  # every recorded job of a hostile request ended FAILED
