"""JobFeed: the simulator's background consumer that folds every `k4d.sim.*` event into
the JobTable, plus the dead-letter bridge.

- Each simulator process joins its own, new consumer group and reads every topic from
  the beginning: a restarted simulator rebuilds its table (and idempotency index) by
  replay. It never commits; the table, not the offset, is its state.
- Dead letters: a message on `<input topic>.dlq` means the stage consuming that topic
  gave up on the job. The feed turns it into a `k4d.sim.failed` event naming the stage and
  the reason, published while the job is not yet terminal in its table. A replay may
  publish a duplicate (when it reads the dead letter before the failure); the table folds
  the first failure in the topic and ignores later terminal events, so state is the same.
"""

from __future__ import annotations

import threading
import uuid

from k4d import errors
from k4d.bus import HEADER_ERROR, HEADER_ERROR_TYPE, dlq, event_headers
from k4d.telemetry import get_logger
from k4d_simulator import events as ev
from k4d_simulator.jobs import JobTable, is_terminal
from kinema4d.v1 import common_pb2, events_pb2

log = get_logger(__name__)

# Input topic of each stage -> the stage that consumes it.
STAGE_OF_INPUT = {ev.TOPIC_REQUESTED: "kinematics", ev.TOPIC_KINEMATICS: "projection",
                  ev.TOPIC_PROJECTED: "generation"}
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

    def __init__(self, bus, table: JobTable, *, group_prefix: str = "k4d-simulator",
                 poll_timeout_s: float = 0.2):
        self.bus, self.table, self.poll_timeout_s = bus, table, poll_timeout_s
        self.group_id = f"{group_prefix}-{uuid.uuid4().hex[:12]}"
        self.topics = [*ev.SIM_TOPICS, *DLQ_TOPICS]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events_applied = 0

    def start(self) -> JobFeed:
        self.bus.ensure_topics(self.topics)
        self._thread = threading.Thread(target=self.run, name="job-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def run(self, stop_event: threading.Event | None = None) -> None:
        stop = stop_event or self._stop
        consumer = self.bus.consumer(self.topics, self.group_id, from_beginning=True)
        try:
            while not stop.is_set() and not self._stop.is_set():
                for message in consumer.poll(self.poll_timeout_s, max_records=100):
                    self.handle(message)
        finally:
            consumer.close()

    def handle(self, message) -> None:
        """Fold one bus message; a malformed one is logged and skipped, never fatal."""
        try:
            if message.topic in DLQ_TOPICS:
                self._dead_letter(message)
                return
            headers = {k: v.decode(errors="replace") for k, v in message.headers.items()}
            self.table.apply(message.topic, message.value, headers)
            self.events_applied += 1
        except Exception:
            log.exception("cannot apply event", extra={"topic": message.topic,
                                                       "offset": message.offset})

    def _dead_letter(self, message) -> None:
        failure = failure_from_dead_letter(message)
        if failure is None:
            return
        job_id = failure.header.job_id
        if job_id in self.table and is_terminal(self.table.get(job_id).state):
            return
        # Not applied here: the table takes it from k4d.sim.failed like any other event,
        # so a replay (which may see the dead letter again and publish a duplicate) folds
        # the first failure in the topic's order and rebuilds the same record.
        self.bus.publish(ev.TOPIC_FAILED, job_id, failure.SerializeToString(),
                         event_headers(job_id, message.attempt))
