"""SimulatorService over a real gRPC channel, with the in-process bus and a local store.

Stage events are published on the bus exactly as the stage workers publish them (the
contract of events.proto); the table must follow them."""

import contextlib
import threading
import time

import grpc
import numpy as np
import pytest
from k4d import auth
from k4d.bus import InProcessBus, dlq, event_headers
from k4d.bus.stage_events import cancel_marker_key
from k4d.config import Config
from k4d.errors import InvalidArgument, NotFound, Unavailable
from k4d.grpc_client import ClientSecurity, create_channel, field_violations
from k4d.grpc_server import create_server
from k4d.model_names import STATIC_WORLD
from k4d.store import LocalStore, put_array
from k4d.tensor_io import to_tensor
from k4d_simulator import events as ev
from k4d_simulator.api import SimulatorServicer
from k4d_simulator.feed import DLQ_TOPICS, JobFeed
from k4d_simulator.jobs import JobTable
from k4d_simulator.server import DEFAULT_MODEL_ENV, build_servicer, default_model_ref
from kinema4d.v1 import (
    common_pb2,
    events_pb2,
    generator_pb2,
    kinematics_pb2,
    simulator_pb2,
    simulator_pb2_grpc,
)

S = simulator_pb2.JobState


def make_spec(height=48, width=72):
    values = np.tile([0.4, 0.0, 0.4, 1.0, 0.0, 0.0, 0.0], (3, 1))
    camera = common_pb2.CameraModel(intrinsics=common_pb2.CameraIntrinsics(
        width=width, height=height, fx=60, fy=60, cx=(width - 1) / 2, cy=(height - 1) / 2))
    camera.t_cam_from_world.values.extend(np.eye(4).reshape(-1))
    return simulator_pb2.SimulationSpec(
        robot=common_pb2.RobotRef(name="panda"),
        actions=kinematics_pb2.ActionSequence(
            type=kinematics_pb2.ACTION_TYPE_EE_ABSOLUTE,
            rotation=kinematics_pb2.ROTATION_FORMAT_QUATERNION_XYZW,
            values=common_pb2.TensorData(inline=to_tensor(values))),
        camera=camera,
        initial_image=common_pb2.TensorData(
            inline=to_tensor(np.full((height, width, 3), 100, np.uint8))),
        sampling=generator_pb2.SamplingParams(num_steps=2))


@contextlib.contextmanager
def simulator_server(tmp_path, **settings):
    """A SimulatorService on loopback over the in-process bus and a local store ->
    (address, bus, store, table, feed)."""
    bus, store, table = InProcessBus(), LocalStore(tmp_path / "store"), JobTable()
    feed = JobFeed(bus, table, poll_timeout_s=0.05).start()
    servicer = SimulatorServicer(bus, store, table, watch_poll_s=0.05)

    def register(server, config):
        simulator_pb2_grpc.add_SimulatorServiceServicer_to_server(servicer, server)
        return ["kinema4d.v1.SimulatorService"]

    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0, **settings),
                                 [register])
    server.start()
    try:
        yield f"127.0.0.1:{port}", bus, store, table, feed
    finally:
        server.stop(0)
        feed.stop()


@pytest.fixture
def service(tmp_path):
    with simulator_server(tmp_path) as (address, bus, store, table, feed):
        channel = grpc.insecure_channel(address)
        yield simulator_pb2_grpc.SimulatorServiceStub(channel), bus, store, table, feed
        channel.close()


def publish_stage_events(bus, store, job_id: str, *, complete: bool = True, repeat: int = 1,
                         failed_frames: int = 0):
    """What the three stage workers publish for one job (completions possibly repeated,
    as a redelivered stage would)."""
    ref = put_array(store, f"jobs/{job_id}/generation/rgb", np.zeros((2, 4, 4, 3), np.uint8))
    h = lambda stage: ev.header(job_id, stage)  # noqa: E731
    bus.publish(ev.TOPIC_KINEMATICS, job_id, events_pb2.KinematicsCompleted(
        header=h("kinematics"), failed_frames=failed_frames, seconds=0.1).SerializeToString(),
        event_headers(job_id))
    bus.publish(ev.TOPIC_PROJECTED, job_id, events_pb2.ProjectionCompleted(
        header=h("projection")).SerializeToString(), event_headers(job_id))
    if complete:
        done = events_pb2.SimulationCompleted(header=h("generation"),
                                              result=simulator_pb2.SimulationResult(
                                                  rgb=ref.to_proto(), rgb_video_uri="x.mp4"))
        for _ in range(repeat):
            bus.publish(ev.TOPIC_COMPLETED, job_id, done.SerializeToString(),
                        event_headers(job_id))


def wait_state(stub, job_id, state, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job
        if job.state == state:
            return job
        time.sleep(0.02)
    raise AssertionError(f"{job_id} not {S.Name(state)}: {job}")


def test_submit_publishes_request_with_stored_image_and_trace(service, span_exporter):
    stub, bus, store, table, _ = service
    job_id = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    consumer = bus.consumer(ev.TOPIC_REQUESTED, "test-reader")
    (message,) = consumer.poll(1.0)
    event = events_pb2.SimulationRequested.FromString(message.value)
    assert message.key == job_id.encode() and event.header.job_id == job_id
    assert event.spec.initial_image.WhichOneof("kind") == "ref"
    assert event.spec.initial_image.ref.uri.endswith(f"jobs/{job_id}/submit/initial_image")
    assert message.header("traceparent") and event.header.traceparent
    assert stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job.state == S.JOB_STATE_QUEUED


def test_job_lifecycle_watch_and_duplicate_completions(service):
    stub, bus, store, table, _ = service
    job_id = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    updates = []
    watcher = threading.Thread(target=lambda: updates.extend(
        u.job for u in stub.Watch(simulator_pb2.WatchRequest(job_id=job_id))))
    watcher.start()
    time.sleep(0.1)
    publish_stage_events(bus, store, job_id, repeat=3)
    watcher.join(10)
    assert not watcher.is_alive()
    states = [u.state for u in updates]
    assert states[0] == S.JOB_STATE_QUEUED and states[-1] == S.JOB_STATE_SUCCEEDED
    assert states.count(S.JOB_STATE_SUCCEEDED) == 1
    job = updates[-1]
    assert job.result.presigned_urls["rgb"].startswith("file://")
    time.sleep(0.2)
    assert table.counts(job_id) == (3, 3)  # three completion events, one completion seen


def test_idempotency_key_returns_the_same_job(service):
    stub, *_ = service
    first = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="k1"))
    again = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="k1"))
    other = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="k2"))
    assert again.job_id == first.job_id and again.deduplicated and not first.deduplicated
    assert other.job_id != first.job_id


def test_bad_request_is_invalid_argument_with_field_violations(service):
    stub, *_ = service
    spec = make_spec()
    spec.ClearField("robot")
    spec.camera.intrinsics.width = 100  # no longer the image's size
    with pytest.raises(grpc.RpcError) as exc:
        stub.Submit(simulator_pb2.SubmitRequest(spec=spec))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = {v.field for v in field_violations(exc.value)}
    assert {"spec.robot", "spec.initial_image"} <= fields


def test_unknown_job_is_not_found(service):
    stub, *_ = service
    with pytest.raises(grpc.RpcError) as exc:
        stub.Get(simulator_pb2.GetRequest(job_id="sim-nope"))
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND


def test_cancel_queued_job_is_immediate_and_running_job_gets_marker(service):
    stub, bus, store, table, _ = service
    queued = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    job = stub.Cancel(simulator_pb2.CancelRequest(job_id=queued)).job
    assert job.state == S.JOB_STATE_CANCELLED and job.cancel_requested
    assert store.exists(cancel_marker_key(queued))
    running = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    publish_stage_events(bus, store, running, complete=False)
    wait_state(stub, running, S.JOB_STATE_RUNNING)
    job = stub.Cancel(simulator_pb2.CancelRequest(job_id=running)).job
    assert job.state == S.JOB_STATE_RUNNING and job.cancel_requested
    assert store.exists(cancel_marker_key(running))
    # a restarted simulator knows of the request from the marker alone
    fresh = SimulatorServicer(bus, store, JobTable())
    for topic in (ev.TOPIC_REQUESTED, ev.TOPIC_KINEMATICS):
        for message in bus.consumer(topic, f"replay-{topic}").poll(1.0, max_records=50):
            fresh.table.apply(topic, message.value)
    restored = fresh.Get(simulator_pb2.GetRequest(job_id=running), None).job
    assert restored.state == S.JOB_STATE_RUNNING and restored.cancel_requested


def test_dead_letter_becomes_a_failed_event_naming_the_stage(service):
    stub, bus, store, table, _ = service
    job_id = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    headers = event_headers(job_id, 3)
    headers.update({"k4d-error": b"RuntimeError: ray caster exploded",
                    "k4d-error-type": b"RuntimeError"})
    bus.publish(dlq(ev.TOPIC_KINEMATICS), job_id, b"original bytes", headers)
    job = wait_state(stub, job_id, S.JOB_STATE_FAILED)
    assert job.error.stage == "projection" and job.error.code == "INTERNAL"
    assert "ray caster exploded" in job.error.message
    consumer = bus.consumer(ev.TOPIC_FAILED, "test-failed-reader")
    (message,) = consumer.poll(1.0)
    assert events_pb2.SimulationFailed.FromString(message.value).error.stage == "projection"


def test_restarted_simulator_rebuilds_state_by_replay(service):
    stub, bus, store, table, _ = service
    done = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="r")).job_id
    publish_stage_events(bus, store, done)
    wait_state(stub, done, S.JOB_STATE_SUCCEEDED)
    fresh = JobTable()
    feed = JobFeed(bus, fresh, poll_timeout_s=0.05).start()
    try:
        deadline = time.monotonic() + 5
        while (done not in fresh or fresh.get(done).state != S.JOB_STATE_SUCCEEDED) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fresh.get(done) == table.get(done)
        again = SimulatorServicer(bus, store, fresh).Submit(
            simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="r"), None)
        assert (again.job_id, again.deduplicated) == (done, True)
    finally:
        feed.stop()


def test_list_jobs_pages(service):
    stub, *_ = service
    ids = [stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id for _ in range(5)]
    seen, token = [], ""
    while True:
        page = stub.ListJobs(simulator_pb2.ListJobsRequest(page_size=2, page_token=token))
        seen += [j.job_id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5


def test_bad_list_jobs_page_token_is_invalid_argument(service):
    stub, *_ = service
    with pytest.raises(grpc.RpcError) as exc:
        stub.ListJobs(simulator_pb2.ListJobsRequest(page_token="not-a-token"))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value.details()


class _FailingBus(InProcessBus):
    def __init__(self):
        super().__init__()
        self.fail = True

    def _send(self, topic, key, value, headers):
        if self.fail:
            from k4d.errors import Unavailable

            raise Unavailable("broker down")
        super()._send(topic, key, value, headers)


def test_a_second_replica_knows_a_job_from_its_durable_record(service, tmp_path):
    """A replica that has not folded a job yet (no feed here at all) answers from the
    records another replica wrote: never NOT_FOUND for a known job, and one key is one
    job across replicas."""
    stub, bus, store, table, _ = service
    other = SimulatorServicer(InProcessBus(), store, JobTable())
    key_job = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="k"))
    plain = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    for job_id in (key_job.job_id, plain):
        got = other.Get(simulator_pb2.GetRequest(job_id=job_id), None).job
        assert got.state == S.JOB_STATE_QUEUED and got.job_id == job_id
    again = other.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="k"), None)
    assert (again.job_id, again.deduplicated) == (key_job.job_id, True)
    # the loser's stored image is removed: only the winner's submit objects remain
    submits = [k for k in store.list("jobs/") if "/submit/" in k]
    assert sorted(k.split("/")[1] for k in submits) == sorted([key_job.job_id, plain])
    for unknown in ("sim-6747a1b2-0123456789ab", "x" * 10_000, "../../etc", "sim-0-unknown"):
        with pytest.raises(NotFound):  # never a store error for an id no Submit made
            other.Get(simulator_pb2.GetRequest(job_id=unknown), None)


def test_submit_whose_publish_fails_releases_its_idempotency_key(tmp_path):
    bus, store = _FailingBus(), LocalStore(tmp_path / "store")
    servicer = SimulatorServicer(bus, store, JobTable())
    request = simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="retry-me")
    with pytest.raises(Unavailable):
        servicer.Submit(request, None)
    bus.fail = False
    answer = servicer.Submit(request, None)
    assert not answer.deduplicated  # a retry makes a job that runs, not the dead one
    assert servicer.Submit(request, None).job_id == answer.job_id


def test_stage_outcomes_are_in_the_result(service):
    stub, bus, store, *_ = service
    job_id = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    publish_stage_events(bus, store, job_id, failed_frames=2)
    job = wait_state(stub, job_id, S.JOB_STATE_SUCCEEDED)
    assert job.result.stages[0].stage == "kinematics"
    assert job.result.stages[0].failed_frames == 2
    assert "IK missed its tolerances on 2 of 49 frames" in job.result.stages[0].warnings[0]


def test_a_claim_whose_submit_died_before_publishing_is_published_by_the_next_submit(tmp_path):
    """A replica that died between claiming a key and publishing leaves a claim without a
    request record; once it is older than PUBLISH_GRACE_S, the next Submit of the key
    publishes that request (else the job would stay QUEUED forever)."""
    from k4d_simulator.jobs import IDEMPOTENCY_WINDOW_S
    from k4d_simulator.records import PUBLISH_GRACE_S, JobRecords

    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    records = JobRecords(store)
    orphan = events_pb2.SimulationRequested(
        header=ev.header("sim-1-0123456789ab", "submit", now_s=time.time() - PUBLISH_GRACE_S - 5),
        spec=make_spec())
    assert records.claim("dead-replica", orphan, time.time_ns(), IDEMPOTENCY_WINDOW_S)[1]
    reader = bus.reader([ev.TOPIC_REQUESTED])
    servicer = SimulatorServicer(bus, store, JobTable(), records)
    answer = servicer.Submit(simulator_pb2.SubmitRequest(spec=make_spec(),
                                                         idempotency_key="dead-replica"), None)
    assert (answer.job_id, answer.deduplicated) == ("sim-1-0123456789ab", True)
    published = reader.poll(1.0, max_records=10)
    assert [m.key.decode() for m in published] == ["sim-1-0123456789ab"]
    assert records.is_published("sim-1-0123456789ab")
    servicer.Submit(simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="dead-replica"),
                    None)
    assert reader.poll(0.2, max_records=10) == []  # published once


def test_a_restarted_feed_does_not_bridge_a_dead_letter_again(service):
    stub, bus, store, table, _ = service
    job_id = stub.Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    headers = event_headers(job_id, 3)
    headers.update({"k4d-error": b"NotFound: no robot", "k4d-error-type": b"NotFound"})
    bus.publish(dlq(ev.TOPIC_REQUESTED), job_id, b"original bytes", headers)
    wait_state(stub, job_id, S.JOB_STATE_FAILED)
    failures = bus.reader([ev.TOPIC_FAILED])
    assert len(failures.poll(1.0, max_records=10)) == 1
    for _ in range(2):  # restarts replay the dead letter and the failure it became
        fresh = JobTable()
        feed = JobFeed(bus, fresh, poll_timeout_s=0.05)
        # Kafka gives no order across topics: here the dead letters come first.
        feed.topics = [*DLQ_TOPICS, *ev.SIM_TOPICS]
        feed.start()
        try:
            assert feed.wait_ready(5)
            assert fresh.get(job_id).state == S.JOB_STATE_FAILED
        finally:
            feed.stop()
    assert failures.poll(0.3, max_records=10) == []


# --- K4D_SIMULATOR_DEFAULT_MODEL ---------------------------------------------------------
# The front door fills the cluster's default model (what `k4d up` published, the model
# `k4d simulate` runs without --model) into a submitted spec that names no model, and leaves
# alone a spec that names one or asks for the static-world backend. The servicer is built as
# `k4d serve simulator` builds it (build_servicer reads the setting); the proof is the
# SimulationRequested event the stage workers receive.


@pytest.fixture
def front_door(tmp_path, monkeypatch):
    """build_servicer with K4D_SIMULATOR_DEFAULT_MODEL=registry:k4d-demo-small/step-3794."""
    monkeypatch.setenv(DEFAULT_MODEL_ENV, "registry:k4d-demo-small/step-3794")
    bus = InProcessBus()
    servicer, feed = build_servicer(None, bus, LocalStore(tmp_path / "store"))
    reader = bus.reader([ev.TOPIC_REQUESTED])
    try:
        yield servicer, reader
    finally:
        feed.stop()


def _submitted_spec(servicer, reader, spec) -> simulator_pb2.SimulationSpec:
    job_id = servicer.Submit(simulator_pb2.SubmitRequest(spec=spec), None).job_id
    (message,) = reader.poll(1.0, max_records=10)
    event = events_pb2.SimulationRequested.FromString(message.value)
    assert event.header.job_id == job_id
    # the durable request record (what another replica answers from) says the same
    request, _ = servicer.records.load(job_id)
    assert request.spec.model == event.spec.model
    return event.spec


def test_a_spec_without_a_model_gets_the_default(front_door):
    servicer, reader = front_door
    spec = _submitted_spec(servicer, reader, make_spec())
    assert (spec.model.name, spec.model.version, spec.model.uri) == (
        "k4d-demo-small", "step-3794", "")


def test_a_named_model_or_the_static_world_backend_is_kept(front_door):
    servicer, reader = front_door
    named = make_spec()
    named.model.CopyFrom(common_pb2.ModelRef(name="mine", version="7"))
    assert _submitted_spec(servicer, reader, named).model == named.model
    by_uri = make_spec()
    by_uri.model.uri = "s3://models/mine/7"
    assert _submitted_spec(servicer, reader, by_uri).model == by_uri.model
    floor = make_spec()
    floor.sampling.backend = STATIC_WORLD
    spec = _submitted_spec(servicer, reader, floor)
    assert not spec.HasField("model") and spec.sampling.backend == STATIC_WORLD


def test_without_the_setting_a_spec_keeps_no_model(tmp_path, monkeypatch):
    monkeypatch.delenv(DEFAULT_MODEL_ENV, raising=False)
    bus = InProcessBus()
    servicer, feed = build_servicer(None, bus, LocalStore(tmp_path / "store"))
    try:
        assert servicer.default_model is None
        spec = _submitted_spec(servicer, bus.reader([ev.TOPIC_REQUESTED]), make_spec())
        assert not spec.HasField("model")
    finally:
        feed.stop()


@pytest.mark.parametrize(("value", "expected"), [
    ("registry:k4d-demo-small/step-3794", ("k4d-demo-small", "step-3794")),
    ("k4d-demo-small", ("k4d-demo-small", "")),  # no version = the registry's latest
    (" k4d-demo-small/3 ", ("k4d-demo-small", "3")),
])
def test_default_model_reference_forms(value, expected):
    ref = default_model_ref(value)
    assert (ref.name, ref.version, ref.uri) == (*expected, "")


@pytest.mark.parametrize("value", ["registry:", "a/b/c", "s3://models/x", "../x", "a b"])
def test_a_malformed_setting_names_the_variable(value):
    with pytest.raises(InvalidArgument) as exc:
        default_model_ref(value)
    assert [v.field for v in exc.value.violations] == [DEFAULT_MODEL_ENV]


# --- jobs belong to their submitter (issue 47): a token file behind the real server ------

TOKENS = {"alice": ("user", "a-token"), "bob": ("user", "b-token"),
          "root": ("operator", "r-token")}


@pytest.fixture
def simulator(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(auth.token_line(role, name, token) + "\n"
                              for name, (role, token) in TOKENS.items()))
    with simulator_server(tmp_path, auth_tokens=str(tokens)) as (address, bus, *_):
        channels = {name: create_channel(address, security=ClientSecurity(token=token))
                    for name, (_, token) in TOKENS.items()}
        yield {name: simulator_pb2_grpc.SimulatorServiceStub(c) for name, c in channels.items()}, bus
        for channel in channels.values():
            channel.close()


def _not_found(call) -> None:
    with pytest.raises(grpc.RpcError) as error:
        call()
    assert error.value.code() is grpc.StatusCode.NOT_FOUND


def test_users_see_and_cancel_only_their_own_jobs(simulator):
    stubs, bus = simulator
    alice = stubs["alice"].Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    bob = stubs["bob"].Submit(simulator_pb2.SubmitRequest(spec=make_spec())).job_id
    assert stubs["alice"].Get(simulator_pb2.GetRequest(job_id=alice)).job.owner == "alice"

    for call in (lambda: stubs["bob"].Get(simulator_pb2.GetRequest(job_id=alice)),
                 lambda: next(stubs["bob"].Watch(simulator_pb2.WatchRequest(job_id=alice))),
                 lambda: stubs["bob"].Cancel(simulator_pb2.CancelRequest(job_id=alice))):
        _not_found(call)
    assert stubs["alice"].Get(simulator_pb2.GetRequest(job_id=alice)).job.state == \
        S.JOB_STATE_QUEUED  # bob's cancel did nothing
    listed = {n: [j.job_id for j in stubs[n].ListJobs(simulator_pb2.ListJobsRequest()).jobs]
              for n in TOKENS}
    assert listed["alice"] == [alice] and listed["bob"] == [bob]
    assert set(listed["root"]) == {alice, bob}

    # An operator cancels anyone's job; the owner travels in the event and its headers.
    job = stubs["root"].Cancel(simulator_pb2.CancelRequest(job_id=alice)).job
    assert job.state == S.JOB_STATE_CANCELLED and job.owner == "alice"
    consumer = bus.consumer(ev.TOPIC_REQUESTED, "owners-test")
    owners = {}
    for message in consumer.poll(1.0, max_records=10):
        event = events_pb2.SimulationRequested.FromString(message.value)
        owners[event.header.job_id] = (event.header.owner, message.header(ev.HEADER_OWNER))
    assert owners == {alice: ("alice", "alice"), bob: ("bob", "bob")}


def test_an_idempotency_key_is_the_submitters_own(simulator):
    stubs, _ = simulator
    request = simulator_pb2.SubmitRequest(spec=make_spec(), idempotency_key="nightly")
    first = stubs["alice"].Submit(request)
    again = stubs["alice"].Submit(request)
    other = stubs["bob"].Submit(request)
    assert again.deduplicated and again.job_id == first.job_id
    assert not other.deduplicated and other.job_id != first.job_id
