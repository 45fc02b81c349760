"""Kafka worker: `k4d.train.requested` -> a launched run -> progress on `k4d.train.events`.

Two loops in `run(stop)`:
- the StageWorker consumes TrainingRequested: check the job (finished, cancelled, already
  running here: nothing to do, so a redelivery is harmless), validate the spec, launch the
  run, record RUNNING, emit a TrainingEvent, commit. A training run takes hours, so the
  handler never waits for it (a consumer that blocked would be thrown out of its group).
- the monitor follows every run this worker launched or adopted: it folds RUN_URI/status.json
  into the job record and emits a TrainingEvent whenever the record changed; it forwards a
  cancellation to the run (RUN_URI/cancel) and terminates a run that ignores it past the
  grace; it relaunches with --resume a run that died without a final status (up to
  K4D_TRAINER_MAX_RESTARTS), else records it FAILED with the end of its log.
On start the worker adopts the unfinished runs of a previous process (still running: follow
it; gone: resume it). On stop it SIGTERMs its local runs, which checkpoint; the next
trainer process resumes them.
"""

from __future__ import annotations

import threading
import time

from k4d.bus import StageWorker
from k4d.bus.stage_events import read_stage_event
from k4d.bus.topics import TRAIN_REQUESTED
from k4d.errors import InvalidArgument, NotFound
from k4d.logs import get_logger, log_context
from k4d.settings import TrainerSettings
from kinema4d.v1 import events_pb2, trainer_pb2

from k4d_trainer import runs
from k4d_trainer.control import jobs
from k4d_trainer.control.events import STAGE, publish_event
from k4d_trainer.control.launcher import Launch, build_launcher
from k4d_trainer.control.metrics import trainer_metrics
from k4d_trainer.control.records import PREFIX, JobRecords
from k4d_trainer.control.settings import load_settings
from k4d_trainer.control.spec import validate_spec

log = get_logger(__name__)
GROUP_ID = "k4d-trainer"
T = trainer_pb2.TrainingState
STOP_GRACE_S = 15.0
# A run that wrote its final status gets this long to exit before it is terminated.
EXIT_GRACE_S = 60.0


def launch_key(job_id: str) -> str:
    return f"{PREFIX}/launches/{job_id}.json"


class _Followed:
    """What the monitor keeps per run: the launch, when a cancel was forwarded, when the
    final status was seen, how many times the run died on its own."""

    def __init__(self, launch: Launch, plan, traceparent: str = ""):
        self.launch, self.plan, self.traceparent = launch, plan, traceparent
        self.cancel_sent_at: float | None = None
        self.final_seen_at: float | None = None
        self.crashes = 0


class TrainerWorker:
    def __init__(self, config, bus, store, settings: TrainerSettings | None = None, launcher=None):
        self.config, self.bus, self.store = config, bus, store
        self.settings = settings or load_settings()
        self.launcher = launcher or build_launcher(config, self.settings)
        self.records = JobRecords(store)
        self.metrics = trainer_metrics()
        self._followed: dict[str, _Followed] = {}
        self._lock = threading.RLock()

    # --- the stage: k4d.train.requested ----------------------------------------------

    def handle(self, message) -> None:
        request, context = read_stage_event(message, events_pb2.TrainingRequested, STAGE)
        job_id = context.job_id
        if not jobs.is_job_id(job_id):
            raise InvalidArgument.for_field("header.job_id", f"not a training job id: {job_id[:80]!r}")
        with self._lock:
            if job_id in self._followed:
                return  # a redelivery of a run we follow
            job = self._record_for(job_id, request.spec)
            if jobs.is_terminal(job.state):
                return
            if self.records.cancel_requested(job_id):
                self._finish(job_id, T.TRAINING_STATE_CANCELLED,
                             jobs.error_info("CANCELLED", "cancelled before the run started"))
                return
            try:
                plan = validate_spec(job.spec)
            except InvalidArgument as exc:
                self._finish(job_id, T.TRAINING_STATE_FAILED, jobs.error_info(
                    "INVALID_ARGUMENT", str(exc), violations=[(v.field, v.description)
                                                              for v in exc.violations]))
                return
            previous = self._load_launch(job_id)
            if previous is not None and self.launcher.adopt(previous):
                self._follow(previous, plan, context.traceparent)
                return
            try:
                self._start(job, plan, context.traceparent, resume=self._has_status(job.run_uri))
            except Exception as exc:
                # The StageWorker retries; after its last attempt the request goes to the
                # DLQ, and the job must not stay QUEUED forever.
                if context.attempt >= self.config.worker_max_attempts:
                    self._finish(job_id, T.TRAINING_STATE_FAILED, jobs.error_info(
                        "UNAVAILABLE", f"the run could not be started: {type(exc).__name__}: "
                                       f"{exc}"), context.traceparent)
                raise

    def _record_for(self, job_id: str, spec) -> trainer_pb2.TrainingJob:
        """The job's record; an event published without Submit (another producer) gets one."""
        try:
            return self.records.get(job_id)
        except NotFound:
            job = jobs.new_job(job_id, spec, self.records.run_uri(job_id), spec.num_steps)
            self.records.put(job)
            return job

    def _start(self, job: trainer_pb2.TrainingJob, plan, traceparent: str, *, resume: bool) -> None:
        launch = self.launcher.launch(job.job_id, plan, job.run_uri, resume=resume,
                                      launches=job.launches + 1)
        self.store.put_bytes(launch_key(job.job_id), launch.to_json(), "application/json")
        self.metrics.launches.labels(self.launcher.kind, str(resume).lower()).inc()

        def running(record: trainer_pb2.TrainingJob) -> bool:
            record.launches = launch.launches
            jobs.advance(record, T.TRAINING_STATE_RUNNING)
            record.updated_at.CopyFrom(jobs.timestamp())
            return True

        job, _ = self.records.update(job.job_id, running)
        self._follow(launch, plan, traceparent)
        publish_event(self.bus, job, traceparent=traceparent)

    def _follow(self, launch: Launch, plan, traceparent: str = "") -> None:
        with self._lock:
            self._followed[launch.job_id] = _Followed(launch, plan, traceparent)
            self.metrics.followed.set(len(self._followed))

    def _load_launch(self, job_id: str) -> Launch | None:
        try:
            return Launch.from_json(self.store.get_bytes(launch_key(job_id)))
        except NotFound:
            return None

    def _has_status(self, run_uri: str) -> bool:
        try:
            runs.read_status(run_uri, self.config)
            return True
        except (NotFound, InvalidArgument):
            return False

    def _finish(self, job_id: str, state: int, error=None, traceparent: str = "") -> None:
        job, changed = self.records.update(job_id, lambda j: jobs.finish(j, state, error))
        if changed:
            self._count_finished(job)
            publish_event(self.bus, job, traceparent=traceparent)

    def _count_finished(self, job: trainer_pb2.TrainingJob) -> None:
        state = jobs.state_name(job.state).removeprefix("TRAINING_STATE_").lower()
        self.metrics.finished.labels(state).inc()

    # --- the monitor ------------------------------------------------------------------

    def adopt_unfinished(self) -> None:
        """Follow (or resume) the runs a previous trainer process left running."""
        for job in self.records.active():
            launch = self._load_launch(job.job_id)
            if launch is None or launch.kind != self.launcher.kind or job.job_id in self._followed:
                continue  # never launched: its k4d.train.requested is still to be consumed
            with log_context(job.job_id):
                try:
                    plan = validate_spec(job.spec)
                except InvalidArgument:
                    continue
                if self.launcher.adopt(launch):
                    log.info("following a run started by a previous trainer process")
                    self._follow(launch, plan)
                elif launch.interrupted and not self.records.cancel_requested(job.job_id):
                    log.info("resuming a run the previous trainer process stopped")
                    self._start(job, plan, "", resume=True)
                else:
                    self._follow(launch, plan)
                    self._check(job.job_id)  # final status -> finished; else resumed

    def poll_once(self) -> None:
        with self._lock:
            followed = list(self._followed)
        for job_id in followed:
            with log_context(job_id):
                try:
                    self._check(job_id)
                except Exception:
                    # The object store or the API server may be down for a while: try
                    # again next round, never lose the run.
                    log.exception("following the training run failed; retrying")

    def _read_status(self, run_uri: str) -> dict | None:
        try:
            return runs.read_status(run_uri, self.config).to_dict()
        except NotFound:
            return None
        except InvalidArgument as exc:
            log.warning("unreadable status.json", extra={"error": str(exc)})
            return None

    def _check(self, job_id: str) -> None:
        with self._lock:
            f = self._followed.get(job_id)
        if f is None:
            return
        launch = f.launch
        exit_code = self.launcher.exit_code(launch)  # before the status: no lost last write
        status = self._read_status(launch.run_uri)
        if status is not None and status.get("state") == "failed" and exit_code is None:
            # A SIGTERMed worker (a preempted node) writes "failed" and the job carries on
            # (an elastic restart resumes it): final only once the process or job ended.
            status = {**status, "state": "running", "error": None}
        if status is not None:
            job, changed = self.records.update(job_id, lambda j: jobs.apply_status(j, status))
            if changed:
                if jobs.is_terminal(job.state):
                    self._count_finished(job)
                publish_event(self.bus, job, traceparent=f.traceparent)
        job = self.records.get(job_id)
        self._handle_cancel(f, job)
        job = self.records.get(job_id)
        if jobs.is_terminal(job.state):
            self._wind_down(f, exit_code)
            return
        if exit_code is None:
            return
        # The process ended without a final status: cancelled, crashed or killed.
        if self.records.cancel_requested(job_id):
            self._finish(job_id, T.TRAINING_STATE_CANCELLED,
                         jobs.error_info("CANCELLED", "cancelled"), f.traceparent)
            self._forget(job_id)
        elif f.crashes < self.settings.max_restarts:
            f.crashes += 1
            log.warning("training run exited without a final status; resuming it",
                        extra={"exit_code": exit_code, "restart": f.crashes})
            self._forget(job_id)
            self._start(job, f.plan, f.traceparent, resume=True)
            with self._lock:
                self._followed[job_id].crashes = f.crashes
        else:
            tail = self.launcher.log_tail(launch)
            self._finish(job_id, T.TRAINING_STATE_FAILED, jobs.error_info(
                "INTERNAL", f"the training run exited with code {exit_code} without a final "
                            f"status after {f.crashes} restart(s); last log lines:\n{tail}"),
                f.traceparent)
            self._forget(job_id)

    def _handle_cancel(self, f: _Followed, job: trainer_pb2.TrainingJob) -> None:
        if not self.records.cancel_requested(job.job_id):
            return
        if f.cancel_sent_at is None:
            runs.request_cancel(f.launch.run_uri, self.config)
            f.cancel_sent_at = time.monotonic()
            log.info("cancellation forwarded to the run")
            if not jobs.is_terminal(job.state) and not job.cancel_requested:
                def mark(record):
                    if jobs.is_terminal(record.state) or record.cancel_requested:
                        return False
                    record.cancel_requested = True
                    return True

                self.records.update(job.job_id, mark)
        elif time.monotonic() - f.cancel_sent_at > self.settings.cancel_grace_s:
            log.warning("the run did not stop within the cancel grace; terminating it")
            self.launcher.terminate(f.launch, STOP_GRACE_S)
            self._finish(job.job_id, T.TRAINING_STATE_CANCELLED, jobs.error_info(
                "CANCELLED", "cancelled (terminated after the cancel grace)"), f.traceparent)
            self._forget(job.job_id)

    def _wind_down(self, f: _Followed, exit_code: int | None) -> None:
        """The job is finished: stop following once the process is gone too."""
        if exit_code is not None:
            self._forget(f.launch.job_id)
            return
        if f.final_seen_at is None:
            f.final_seen_at = time.monotonic()
        elif time.monotonic() - f.final_seen_at > EXIT_GRACE_S:
            self.launcher.terminate(f.launch, STOP_GRACE_S)
            self._forget(f.launch.job_id)

    def _forget(self, job_id: str) -> None:
        with self._lock:
            self._followed.pop(job_id, None)
            self.metrics.followed.set(len(self._followed))

    def following(self) -> list[str]:
        with self._lock:
            return sorted(self._followed)

    # --- lifecycle --------------------------------------------------------------------

    def _monitor(self, stop: threading.Event) -> None:
        while not stop.wait(self.settings.poll_s):
            self.poll_once()

    def run(self, stop: threading.Event) -> None:
        """Entry of `k4d serve trainer --worker`: consume and follow until `stop`."""
        self.adopt_unfinished()
        monitor = threading.Thread(target=self._monitor, args=(stop,), name="trainer-monitor",
                                   daemon=True)
        monitor.start()
        try:
            StageWorker.from_config(self.config, self.bus, TRAIN_REQUESTED, GROUP_ID,
                                    self.handle).run(stop)
        finally:
            stop.set()
            monitor.join(self.settings.poll_s + 30)
            self.close()

    def close(self) -> None:
        """Stop following. Local runs get SIGTERM (they checkpoint; the next trainer
        process resumes them); PyTorchJobs keep running in the cluster."""
        with self._lock:
            followed = list(self._followed.values())
            self._followed.clear()
            self.metrics.followed.set(0)
        if self.launcher.kind != "local":
            return
        for f in followed:
            f.launch.interrupted = True
            try:
                self.store.put_bytes(launch_key(f.launch.job_id), f.launch.to_json(),
                                     "application/json")
            except Exception:
                log.exception("could not record the interrupted run", extra={"job_id": f.launch.job_id})
            self.launcher.terminate(f.launch, STOP_GRACE_S)


def build_worker(config, bus, store) -> TrainerWorker:
    """Entry point `k4d.workers`: the trainer's Kafka worker and run monitor."""
    return TrainerWorker(config, bus, store)
