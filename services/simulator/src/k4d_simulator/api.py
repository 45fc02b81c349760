"""SimulatorService: the gRPC front door (thin: validate, publish, read the JobTable).

Submit stores the initial image in the object store (events stay small), claims the
idempotency key in the durable records (create-once in the object store, so one key makes
one job across every replica), publishes SimulationRequested on `k4d.sim.requested` (the
bus adds the caller's `traceparent`), records the request durably and folds it into the
local table at once, so Get right after Submit finds the job.
A job belongs to its submitter (`k4d.auth.current_caller()`: the name in its event header
and in the `k4d-owner` Kafka header); users and services see, watch, cancel and list only
their own jobs (another's answers NOT_FOUND, as an unknown one), operators every job.
Job state comes only from events (`JobFeed`) and the durable records they produce; a job
this replica has not folded yet (submitted to another replica a moment ago) is read from
its durable record, so a known job never answers NOT_FOUND.
"""

from __future__ import annotations

import time
import uuid

from k4d.auth import current_caller
from k4d.bus import event_headers
from k4d.bus.stage_events import cancel_marker_key
from k4d.errors import InvalidArgument, NotFound
from k4d.logs import get_logger
from k4d.model_names import STATIC_WORLD
from k4d.store import from_tensor_data, job_key, put_array
from k4d.telemetry import inject_trace_headers
from kinema4d.v1 import common_pb2, events_pb2, simulator_pb2, simulator_pb2_grpc

from k4d_simulator import events as ev
from k4d_simulator.jobs import IDEMPOTENCY_WINDOW_S, JobTable, is_terminal
from k4d_simulator.records import PUBLISH_GRACE_S, JobRecords
from k4d_simulator.validation import validate_spec

log = get_logger(__name__)
S = simulator_pb2.JobState
WATCH_POLL_S = 1.0
PRESIGN_EXPIRES_S = 3600
# SimulationResult TensorRef fields that get a presigned download URL.
RESULT_REFS = ("rgb", "pointmap", "robot_pointmap", "robot_mask", "robot_rgb", "joints", "poses")


def new_job_id() -> str:
    """URL-safe, sortable by creation second, unique: sim-<unix s hex>-<random>."""
    return f"sim-{int(time.time()):x}-{uuid.uuid4().hex[:12]}"


def current_traceparent() -> str:
    headers: dict[str, bytes] = {}
    inject_trace_headers(headers)
    return headers.get("traceparent", b"").decode()


# Inputs a Submit moves into the store (jobs/<id>/submit/<name>): events carry references.
STORED_INPUTS = ("initial_image", "initial_depth")

class SimulatorServicer(simulator_pb2_grpc.SimulatorServiceServicer):
    def __init__(self, bus, store, table: JobTable, records: JobRecords | None = None, *,
                 watch_poll_s: float = WATCH_POLL_S,
                 default_model: common_pb2.ModelRef | None = None):
        self.bus, self.store, self.table = bus, store, table
        self.records = records or JobRecords(store)
        self.watch_poll_s = watch_poll_s
        self.default_model = default_model  # for specs that name no model (K4D_SIMULATOR_...)

    # --- Submit --------------------------------------------------------------------

    def Submit(self, request, context):
        self._fill_default_model(request.spec)
        validate_spec(request.spec)
        key = request.idempotency_key
        if len(key) > 256:
            raise InvalidArgument.for_field("idempotency_key", "at most 256 characters")
        submitter = _submitter()
        job_id = new_job_id()
        spec = self._with_stored_image(job_id, request.spec)
        event = events_pb2.SimulationRequested(
            header=ev.header(job_id, "submit", traceparent=current_traceparent(),
                             owner=submitter), spec=spec)
        extra = ev.owner_headers(submitter, **({ev.HEADER_IDEMPOTENCY_KEY: key} if key else {}))
        # A key is the submitter's: another caller's same key makes its own job.
        key = f"{submitter}/{key}" if key and submitter else key
        if key:
            owner, created = self.records.claim(key, event, time.time_ns(),
                                                IDEMPOTENCY_WINDOW_S)
            if not created:
                if spec is not request.spec:
                    for name in STORED_INPUTS:
                        if spec.HasField(name):
                            self.store.delete(job_key(job_id, "submit", name))
                self._ensure_published(owner, extra)
                self.table.apply(ev.TOPIC_REQUESTED, owner, extra)
                return simulator_pb2.SubmitResponse(job_id=owner.header.job_id,
                                                    deduplicated=True)
        try:
            self.bus.publish(ev.TOPIC_REQUESTED, job_id, event.SerializeToString(),
                             event_headers(job_id, 1, **extra))
        except Exception:
            if key:  # a retry of the key must make a new job, not find one that never ran
                self.records.release(key, event)
            raise
        self._record_requested(event)
        self.table.apply(ev.TOPIC_REQUESTED, event, extra)
        return simulator_pb2.SubmitResponse(job_id=job_id, deduplicated=False)

    def _fill_default_model(self, spec: simulator_pb2.SimulationSpec) -> None:
        """A spec without a model gets the cluster's default model (what `k4d simulate` runs
        without --model), unless it asks for the static-world backend; the job record then
        names the model that ran."""
        if self.default_model is not None and not (spec.model.name or spec.model.uri) \
                and spec.sampling.backend != STATIC_WORLD:
            spec.model.CopyFrom(self.default_model)

    def _record_requested(self, event) -> None:
        try:
            self.records.put_requested(event)
        except Exception:  # published already: the final record will cover the job
            log.exception("cannot write the job's request record",
                          extra={"job_id": event.header.job_id})

    def _ensure_published(self, owner, extra: dict[str, str]) -> None:
        """A key claimed by a Submit that never published (its replica died in between)
        is published now, once the claim is older than PUBLISH_GRACE_S."""
        job_id = owner.header.job_id
        age_s = time.time() - owner.header.created_at.ToNanoseconds() / 1e9
        if age_s < PUBLISH_GRACE_S or self.records.is_published(job_id):
            return
        log.warning("publishing the request of an orphaned idempotency claim",
                    extra={"job_id": job_id})
        self.bus.publish(ev.TOPIC_REQUESTED, job_id, owner.SerializeToString(),
                         event_headers(job_id, 1, **extra))
        self._record_requested(owner)

    def _with_stored_image(self, job_id: str, spec):
        """The spec with its initial image (and depth) by reference (stored under
        jobs/<id>/submit/): events carry references, not megabytes."""
        inline = [name for name in STORED_INPUTS
                  if spec.HasField(name) and getattr(spec, name).WhichOneof("kind") == "inline"]
        if not inline:
            return spec
        stored = simulator_pb2.SimulationSpec()
        stored.CopyFrom(spec)
        for name in inline:
            data = getattr(spec, name)
            array = from_tensor_data(data, None, f"spec.{name}")
            ref = put_array(self.store, job_key(job_id, "submit", name), array)
            getattr(stored, name).ref.CopyFrom(ref.to_proto())
        return stored

    # --- reading -------------------------------------------------------------------

    def _view(self, job: simulator_pb2.Job) -> simulator_pb2.Job:
        """The job as clients see it: result refs with presigned URLs."""
        if job.state == S.JOB_STATE_SUCCEEDED:
            for name in RESULT_REFS:
                ref = getattr(job.result, name)
                if ref.uri and name not in job.result.presigned_urls:
                    try:
                        key = self.store.key_for_uri(ref.uri)
                        job.result.presigned_urls[name] = self.store.presign_get(
                            key, PRESIGN_EXPIRES_S)
                    except InvalidArgument:
                        pass  # a ref into another store: the URI is all we can give
            video = job.result.rgb_video_uri
            if video and "rgb_video" not in job.result.presigned_urls:
                try:
                    job.result.presigned_urls["rgb_video"] = self.store.presign_get(
                        self.store.key_for_uri(video), PRESIGN_EXPIRES_S)
                except InvalidArgument:
                    pass
        return job

    def _known(self, job_id: str) -> simulator_pb2.Job:
        """The job from the table, else from its durable record (submitted to another
        replica and not folded here yet); NotFound when neither has it."""
        try:
            return self.table.get(job_id)
        except NotFound:
            request, final = self.records.load(job_id)
            if final is not None:
                self.table.restore(final)
            elif request is not None:
                self.table.apply(ev.TOPIC_REQUESTED, request)
            return self.table.get(job_id)

    def _current(self, job_id: str) -> simulator_pb2.Job:
        """The job, with a cancel request restored from its store marker: the marker is
        the durable record of a request made before this process started."""
        job = self._known(job_id)
        if not job.cancel_requested and not is_terminal(job.state) and \
                self.store.exists(cancel_marker_key(job_id)):
            job = self.table.mark_cancel_requested(job_id)
        return job

    def Get(self, request, context):
        _require_id(request.job_id)
        return simulator_pb2.GetResponse(job=self._view(_visible(self._current(request.job_id))))

    def Watch(self, request, context):
        _require_id(request.job_id)
        job = _visible(self._current(request.job_id))
        version = self.table.version(request.job_id)
        yield simulator_pb2.WatchResponse(job=self._view(job))
        while not is_terminal(job.state) and context.is_active():
            job, new_version = self.table.wait_for_change(request.job_id, version,
                                                          self.watch_poll_s)
            if new_version != version:
                version = new_version
                yield simulator_pb2.WatchResponse(job=self._view(job))

    def ListJobs(self, request, context):
        jobs, token = self.table.list(request.page_size, request.page_token, request.state,
                                      owner=_visible_owner())
        return simulator_pb2.ListJobsResponse(jobs=[self._view(j) for j in jobs],
                                              next_page_token=token)

    # --- Cancel --------------------------------------------------------------------

    def Cancel(self, request, context):
        """Durable request first (the store marker every stage checks), then: a job no
        stage has started is cancelled at once by a SimulationFailed{CANCELLED}; a running
        one is cancelled by the stage that sees the marker. Cancelling a finished job
        changes nothing."""
        _require_id(request.job_id)
        job = _visible(self._known(request.job_id))
        if is_terminal(job.state):
            return simulator_pb2.CancelResponse(job=self._view(job))
        self.store.put_bytes(cancel_marker_key(request.job_id),
                             f"cancel requested at {time.time():.3f}\n".encode(), "text/plain")
        if job.state == S.JOB_STATE_QUEUED:
            failed = events_pb2.SimulationFailed(
                header=ev.header(request.job_id, "submit", traceparent=current_traceparent(),
                                 owner=job.owner),
                error=common_pb2.ErrorInfo(code="CANCELLED", stage="submit",
                                           message="cancelled before any stage started"))
            self.bus.publish(ev.TOPIC_FAILED, request.job_id, failed.SerializeToString(),
                             event_headers(request.job_id, 1, **ev.owner_headers(job.owner)))
            self.table.apply(ev.TOPIC_FAILED, failed)
        else:
            self.table.mark_cancel_requested(request.job_id)
        return simulator_pb2.CancelResponse(job=self._view(self.table.get(request.job_id)))


def _submitter() -> str:
    """The name a new job is recorded under ("" when the server checks no tokens)."""
    caller = current_caller()
    return "" if caller is None else caller.name


def _visible_owner() -> str | None:
    """Whose jobs the caller may see: its own name, or None for every job (operators, and
    a server that checks no tokens)."""
    caller = current_caller()
    return None if caller is None or caller.sees_all_jobs else caller.name


def _visible(job: simulator_pb2.Job) -> simulator_pb2.Job:
    """`job` when the caller may see it; another's job is NOT_FOUND, like an unknown one
    (no telling whether a job id exists)."""
    owner = _visible_owner()
    if owner is not None and job.owner != owner:
        raise NotFound(f"no job with id {job.job_id!r}")
    return job


def _require_id(job_id: str) -> None:
    if not job_id:
        raise InvalidArgument.for_field("job_id", "required")
