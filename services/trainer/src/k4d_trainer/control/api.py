"""TrainerService: the gRPC front of training jobs (thin: validate, record, publish).

Submit validates the spec (the same translation into a recipe config the worker launches),
writes the QUEUED record to the object store, then publishes TrainingRequested on
`k4d.train.requested`. Job state is written by the worker that follows the run; Get, List
and Watch read the durable records, so any trainer replica answers for any job.
"""

from __future__ import annotations

import threading

from k4d.errors import InvalidArgument, Unavailable
from k4d.logs import get_logger
from kinema4d.v1 import trainer_pb2, trainer_pb2_grpc

from k4d_trainer.control import jobs
from k4d_trainer.control.events import publish_event, publish_requested
from k4d_trainer.control.records import JobRecords
from k4d_trainer.control.spec import MAX_IDEMPOTENCY_KEY_CHARS, validate_spec

log = get_logger(__name__)
T = trainer_pb2.TrainingState
WATCH_POLL_S = 0.5


class TrainerServicer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self, bus, store, *, watch_poll_s: float = WATCH_POLL_S):
        self.bus, self.records = bus, JobRecords(store)
        self.watch_poll_s = watch_poll_s

    def SubmitTrainingJob(self, request, context):
        key = request.idempotency_key
        if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
            raise InvalidArgument.for_field("idempotency_key",
                                            f"at most {MAX_IDEMPOTENCY_KEY_CHARS} characters")
        plan = validate_spec(request.spec)
        job_id = jobs.new_job_id()
        if key:
            existing = self.records.claim_idempotency(key, job_id)
            if existing is not None:
                return trainer_pb2.SubmitTrainingJobResponse(
                    job=self.records.get(existing), deduplicated=True)
        job = jobs.new_job(job_id, request.spec, self.records.run_uri(job_id), plan.steps)
        self.records.put(job)
        try:
            publish_requested(self.bus, job, key)
        except Exception:
            log.exception("publishing k4d.train.requested failed", extra={"job_id": job_id})
            self.records.update(job_id, lambda j: jobs.finish(j, T.TRAINING_STATE_FAILED, jobs.error_info(
                "UNAVAILABLE", "the job could not be queued (event bus unavailable)")))
            raise Unavailable("the event bus is unavailable; the job was not queued") from None
        return trainer_pb2.SubmitTrainingJobResponse(job=job, deduplicated=False)

    def GetTrainingJob(self, request, context):
        _require_id(request.job_id)
        return trainer_pb2.GetTrainingJobResponse(job=self.records.get(request.job_id))

    def ListTrainingJobs(self, request, context):
        page, token = self.records.list(request.page_size, request.page_token, request.state)
        return trainer_pb2.ListTrainingJobsResponse(jobs=page, next_page_token=token)

    def WatchTrainingJob(self, request, context):
        _require_id(request.job_id)
        job = self.records.get(request.job_id)
        yield trainer_pb2.WatchTrainingJobResponse(job=job)
        seen = job.SerializeToString(deterministic=True)
        stop = threading.Event()
        context.add_callback(stop.set)
        while not jobs.is_terminal(job.state) and context.is_active():
            if stop.wait(self.watch_poll_s):
                break
            job = self.records.get(request.job_id)
            current = job.SerializeToString(deterministic=True)
            if current != seen:
                seen = current
                yield trainer_pb2.WatchTrainingJobResponse(job=job)

    def CancelTrainingJob(self, request, context):
        """The durable request first (trainer/cancel/<id>, which the worker forwards to the
        run); a job no run has started yet is cancelled at once. A finished job stays as
        it is."""
        _require_id(request.job_id)
        job = self.records.get(request.job_id)
        if jobs.is_terminal(job.state):
            return trainer_pb2.CancelTrainingJobResponse(job=job)
        self.records.request_cancel(request.job_id)

        def cancel(record: trainer_pb2.TrainingJob) -> bool:
            if record.state == T.TRAINING_STATE_QUEUED:
                return jobs.finish(record, T.TRAINING_STATE_CANCELLED, jobs.error_info(
                    "CANCELLED", "cancelled before the run started", stage="submit"))
            if jobs.is_terminal(record.state) or record.cancel_requested:
                return False
            record.cancel_requested = True
            record.updated_at.CopyFrom(jobs.timestamp())
            return True

        job, changed = self.records.update(request.job_id, cancel)
        if changed and jobs.is_terminal(job.state):
            publish_event(self.bus, job, stage="submit")
        return trainer_pb2.CancelTrainingJobResponse(job=job)


def _require_id(job_id: str) -> None:
    if not job_id:
        raise InvalidArgument.for_field("job_id", "required")
    if len(job_id) > 128:
        raise InvalidArgument.for_field("job_id", "at most 128 characters")
