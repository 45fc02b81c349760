"""JobFeed: the simulator's background consumer that folds every `k4d.sim.*` event into
the JobTable, plus the dead-letter bridge.

- Each simulator replica reads every partition of every topic from the beginning with a
  group-less reader (`Bus.reader`: no consumer group is created, none is left behind, no
  rebalance between replicas): a restarted replica rebuilds its table by replay. It never
  commits; the table, not the offset, is its state.
- Durable records first (`JobRecords`, when given): the final record of every finished
  job and the request of every unfinished one are loaded before the replay, so jobs
  whose events have expired from the topics are still there.
- Ready = caught up: `ready` is set once the reader has reached the end offsets the
  topics had when it started (and the records are loaded); until then the front door
  reports NOT_SERVING, so no replica answers NOT_FOUND for a job it has not replayed yet.
- Jobs that become terminal get their durable final record (create-once: whichever
  replica folds it first writes it). During the replay the writes wait until the feed
  has caught up, so a record includes every stage's event whatever order they came in.
- Dead letters: a message on `<input topic>.dlq` means the stage consuming that topic
  gave up on the job. The feed turns it into a `k4d.sim.failed` event naming the stage and
  the reason, published while the job is not yet terminal in its table. Dead letters
  met during the replay are bridged once it has caught up (their failures, published
  before the restart, are folded by then), so a restart publishes no duplicates; two
  replicas bridging a new dead letter at once may, and the table folds the first failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from k4d import errors, pipeline_topology
from k4d.bus import HEADER_ERROR, HEADER_ERROR_TYPE, dlq, event_headers
from k4d.logs import get_logger
from kinema4d.v1 import common_pb2, events_pb2

from k4d_simulator import events as ev
from k4d_simulator.jobs import JobTable, is_terminal
from k4d_simulator.records import JobRecords

log = get_logger(__name__)
RETRY_S = 2.0
# Final records read one by one at start from which on a snapshot is written.
SNAPSHOT_MIN_RECORDS = 200

# Input topic of each simulation stage -> the stage that consumes it (pipeline topology).
STAGE_OF_INPUT = {topic: stage.name for stage in pipeline_topology.simulation_stages()
                  for topic in stage.consumes}
DLQ_TOPICS = {dlq(topic): stage for topic, stage in STAGE_OF_INPUT.items()}
# Dead-letter error type header (the exception's class name) -> its gRPC code name.
ERROR_CODES = {cls.__name__: cls.grpc_code_name
               for cls in (errors.InvalidArgument, errors.NotFound, errors.FailedPrecondition,
                           errors.Cancelled, errors.ResourceExhausted, errors.Unavailable,
                           errors.IntegrityError)}


def failure_from_dead_letter(message) -> events_pb2.SimulationFailed | None:
    """The SimulationFailed a dead-lettered stage input stands for (None without job id)."""
    job_id = message.job_id or (message.key.decode() if message.key else "")
    if not job_id:
        return None
    stage = DLQ_TOPICS[message.topic]
    error_type = message.header(HEADER_ERROR_TYPE) or ""
    reason = message.header(HEADER_ERROR) or "unknown error"
    code = ERROR_CODES.get(error_type, "INTERNAL")
    return events_pb2.SimulationFailed(
        header=ev.header(job_id, stage, attempt=message.attempt),
        error=common_pb2.ErrorInfo(
            code=code, stage=stage,
            message=f"{stage} stage gave up after {message.attempt} attempt(s): {reason}"))


class JobFeed:
    """Consumes the sim topics into `table` on a daemon thread until `stop()`."""

    def __init__(self, bus, table: JobTable, records: JobRecords | None = None, *,
                 poll_timeout_s: float = 0.2,
                 on_ready: Callable[[], None] | None = None,
                 snapshot_min_records: int = SNAPSHOT_MIN_RECORDS):
        self.bus, self.table, self.records = bus, table, records
        self.poll_timeout_s, self.on_ready = poll_timeout_s, on_ready
        self.snapshot_min_records = snapshot_min_records
        self.topics = [*pipeline_topology.JOB_STATE_TOPICS, *DLQ_TOPICS]
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events_applied = 0
        self.records_loaded = 0
        self._deferred_dead_letters: list = []

    def start(self) -> JobFeed:
        self.bus.ensure_topics(self.topics)
        self._thread = threading.Thread(target=self._run_logged, name="job-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wait_ready(self, timeout_s: float) -> bool:
        return self.ready.wait(timeout_s)

    def _run_logged(self) -> None:
        """`run`, started again after an outage of the bus or the store (folding is
        idempotent, so starting over from the records and offset 0 is safe)."""
        while not self._stop.is_set():
            try:
                self.run()
                return
            except Exception:
                log.exception("job feed interrupted; starting over in %.0f s", RETRY_S)
                self._stop.wait(RETRY_S)

    def load_records(self) -> None:
        """Fold the durable records into the table (finished: restored; else requested).
        When many final records had to be read one by one, write a snapshot of them all,
        so the next start reads one object instead."""
        if self.records is None:
            return
        snapshot, rest = self.records.load_all()
        for job in snapshot:
            self.table.restore(job)
        finals = []
        for request, final in rest:
            if self._stop.is_set():
                return
            if final is not None:
                self.table.restore(final)
                finals.append(final)
            elif request is not None:
                self.table.apply(ev.TOPIC_REQUESTED, request)
        self.records_loaded = len(snapshot) + len(finals)
        if len(finals) >= self.snapshot_min_records:
            try:
                self.records.put_snapshot(snapshot + finals)
            except Exception:  # an optimisation: the next start reads the records again
                log.exception("cannot write a job records snapshot")

    def run(self, stop_event: threading.Event | None = None) -> None:
        stop = stop_event or self._stop
        started = time.monotonic()
        self.load_records()
        reader = self.bus.reader(self.topics)
        try:
            ends = reader.end_offsets()
            while not stop.is_set() and not self._stop.is_set():
                for message in reader.poll(self.poll_timeout_s, max_records=500):
                    self.handle(message)
                if not self.ready.is_set():
                    positions = reader.positions()
                    if any(positions.get(tp, 0) < end for tp, end in ends.items()):
                        continue
                    deferred, self._deferred_dead_letters = self._deferred_dead_letters, []
                    for dead_letter in deferred:
                        self.handle_dead_letter(dead_letter)
                    self.write_finals()
                    self.ready.set()
                    log.info("job feed caught up", extra={
                        "records": self.records_loaded, "events": self.events_applied,
                        "seconds": round(time.monotonic() - started, 3)})
                    if self.on_ready is not None:
                        self.on_ready()
                else:
                    self.write_finals()
        finally:
            reader.close()

    def write_finals(self) -> None:
        """Durable final records of the jobs that became terminal since the last call."""
        finished = self.table.take_finished()
        if self.records is None:
            return
        for job in finished:
            try:
                self.records.put_final(job)
            except Exception:  # the next replica (or restart) that folds it writes it
                log.exception("cannot write the final job record",
                              extra={"job_id": job.job_id})

    def handle(self, message) -> None:
        """Fold one bus message; a malformed one is logged and skipped, never fatal."""
        try:
            if message.topic in DLQ_TOPICS:
                if self.ready.is_set():
                    self.handle_dead_letter(message)
                else:  # bridged once caught up: by then the failure it stood for is folded
                    self._deferred_dead_letters.append(message)
                return
            headers = {k: v.decode(errors="replace") for k, v in message.headers.items()}
            self.table.apply(message.topic, message.value, headers)
            self.events_applied += 1
        except Exception:
            log.exception("cannot apply event", extra={"topic": message.topic,
                                                       "offset": message.offset})

    def handle_dead_letter(self, message) -> None:
        try:
            self._dead_letter(message)
        except Exception:
            log.exception("cannot bridge a dead letter", extra={"topic": message.topic,
                                                                "offset": message.offset})

    def _dead_letter(self, message) -> None:
        failure = failure_from_dead_letter(message)
        if failure is None:
            return
        job_id = failure.header.job_id
        if job_id in self.table and is_terminal(self.table.get(job_id).state):
            return
        # Not applied here: the table takes it from k4d.sim.failed like any other event.
        # Dead letters read during the replay wait until it has caught up, so a restart
        # does not publish again the failures already on the topic; replicas bridging the
        # same dead letter at once may publish duplicates, and the table folds the first.
        self.bus.publish(ev.TOPIC_FAILED, job_id, failure.SerializeToString(),
                         event_headers(job_id, message.attempt))
