"""StageWorker: consume -> handler(message) -> commit, with retries and a dead-letter topic.

- The handler stores its outputs (deterministic keys) and publishes the next event;
  the offset is committed only after it returned, so a crash means redelivery.
- A failed message is republished to its topic with `k4d-attempt` + 1 after a backoff
  (the count survives crashes because it travels in the message); after `max_attempts`
  it goes to `<topic>.dlq` with the error in headers. Errors that retrying cannot fix
  (InvalidArgument, NotFound) go to the DLQ at once.
- Stop: set the stop event; the current message is finished and committed, then the
  consumer leaves the group.
- `StageWorker.for_stage` builds the worker of a `k4d.sim.*` stage: the prologue every
  stage shares (read the stage event and its job, skip a cancelled job, and report a
  cancellation raised mid-stage as SimulationFailed{CANCELLED}) runs here, and the
  stage's own handler gets (event, StageContext).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace

from k4d.bus.base import (
    HEADER_ATTEMPT,
    HEADER_ERROR,
    HEADER_ERROR_TYPE,
    HEADER_ORIGINAL_OFFSET,
    HEADER_ORIGINAL_TOPIC,
    Bus,
    CommitFailed,
    Consumer,
    Message,
    topic_list,
)
from k4d.bus.stage_events import is_cancelled, publish_cancelled, read_stage_event
from k4d.bus.topics import dlq
from k4d.errors import Cancelled, InvalidArgument, NotFound
from k4d.logs import get_logger, log_context
from k4d.metrics import begin_work, end_work, runtime_metrics
from k4d.retry import backoff_delay
from k4d.telemetry import extract_trace_context

log = get_logger(__name__)
Handler = Callable[[Message], None]
StageHandler = Callable[[Any, Any], None]  # (parsed stage event, k4d.bus.stage_events.StageContext)
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (InvalidArgument, NotFound)
MAX_ERROR_HEADER_CHARS = 2000


class StageWorker:
    def __init__(self, bus: Bus, topics: str | Sequence[str], group_id: str, handler: Handler, *,
                 max_attempts: int = 3, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 poll_timeout_s: float = 0.5,
                 permanent_errors: tuple[type[BaseException], ...] = PERMANENT_ERRORS):
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.bus, self.topics, self.group_id, self.handler = bus, topic_list(topics), group_id, handler
        self.max_attempts, self.backoff_s, self.max_backoff_s = max_attempts, backoff_s, max_backoff_s
        self.poll_timeout_s = poll_timeout_s
        self.permanent_errors = permanent_errors
        self._metrics = runtime_metrics()

    @classmethod
    def from_config(cls, config, bus: Bus, topics: str | Sequence[str], group_id: str,
                    handler: Handler, **kwargs) -> StageWorker:
        kwargs.setdefault("max_attempts", config.worker_max_attempts)
        kwargs.setdefault("backoff_s", config.worker_backoff_s)
        return cls(bus, topics, group_id, handler, **kwargs)

    @classmethod
    def for_stage(cls, config, bus: Bus, store, topic: str, group_id: str, *, stage: str,
                  event_type, handle: StageHandler, **kwargs) -> StageWorker:
        """The worker of one `k4d.sim.*` stage: consumes `event_type` events on `topic` and
        calls `handle(event, context)` for every job that is not cancelled."""
        return cls.from_config(config, bus, topic, group_id,
                               StagePrologue(bus, store, stage, event_type, handle), **kwargs)

    def run(self, stop_event: threading.Event) -> None:
        """Consume until `stop_event` is set; leaves the group on the way out."""
        self.bus.ensure_topics(self.topics + [dlq(t) for t in self.topics])
        consumer = self.bus.consumer(self.topics, self.group_id)
        log.info("stage worker started", extra={"topics": ",".join(self.topics), "group": self.group_id})
        try:
            while not stop_event.is_set():
                for message in consumer.poll(self.poll_timeout_s, max_records=1):
                    self.process(consumer, message, stop_event)
        finally:
            consumer.close()
            log.info("stage worker stopped", extra={"group": self.group_id})

    def process(self, consumer: Consumer, message: Message, stop_event: threading.Event) -> str:
        """Handle one message and commit it; returns the outcome: ok, retry or dlq.
        Metrics: the handler's queue time (in the topic, as the handler noted it with
        `note_queued_since`, plus its `waiting()` blocks) and compute time apart."""
        timing, token = begin_work()
        parent = extract_trace_context(message.headers)
        span_name = f"{message.topic} process"
        with trace.get_tracer("k4d.bus").start_as_current_span(
                span_name, context=parent, kind=trace.SpanKind.CONSUMER,
                attributes={"messaging.system": "kafka", "messaging.destination.name": message.topic,
                            "messaging.consumer.group.name": self.group_id,
                            "messaging.kafka.offset": message.offset,
                            "k4d.attempt": message.attempt, "k4d.job_id": message.job_id or ""}) as span, \
                log_context(message.job_id):
            try:
                self.handler(message)
                outcome = "ok"
            except Exception as exc:  # one bad message must never stop the worker
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
                outcome = self._on_failure(message, exc, stop_event)
            self._commit(consumer, message)
        queued, computed = timing.split()
        end_work(token)
        self._metrics.stage_messages.labels(message.topic, outcome).inc()
        self._metrics.stage_latency.labels(message.topic).observe(
            queued - timing.queued_before_s + computed)
        self._metrics.stage_queue.labels(message.topic).observe(queued)
        self._metrics.stage_compute.labels(message.topic).observe(computed)
        return outcome

    def _on_failure(self, message: Message, exc: Exception, stop_event: threading.Event) -> str:
        attempt = message.attempt
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_HEADER_CHARS]
        permanent = isinstance(exc, self.permanent_errors)
        if attempt < self.max_attempts and not permanent:
            delay = backoff_delay(attempt, self.backoff_s, self.max_backoff_s)
            log.warning("handler failed; retrying", exc_info=exc,
                        extra={"topic": message.topic, "attempt": attempt, "retry_in_s": delay})
            stop_event.wait(delay)  # a stop cuts the wait short; the retry is still queued
            headers = dict(message.headers)
            headers[HEADER_ATTEMPT] = str(attempt + 1).encode()
            headers[HEADER_ERROR] = error.encode()
            self.bus.publish(message.topic, message.key, message.value, headers)
            return "retry"
        log.error("handler failed; sending to the dead-letter topic", exc_info=exc,
                  extra={"topic": message.topic, "attempt": attempt, "permanent": permanent})
        headers = dict(message.headers)
        headers.update({HEADER_ERROR: error.encode(), HEADER_ERROR_TYPE: type(exc).__name__.encode(),
                        HEADER_ORIGINAL_TOPIC: message.topic.encode(),
                        HEADER_ORIGINAL_OFFSET: str(message.offset).encode()})
        self.bus.publish(dlq(message.topic), message.key, message.value, headers)
        return "dlq"

    def _commit(self, consumer: Consumer, message: Message) -> None:
        try:
            consumer.commit(message)
        except CommitFailed as exc:
            # The partition moved to another member, which will see the message again;
            # stages are idempotent, so the duplicate is harmless.
            log.warning("commit failed; message will be redelivered", extra={"error": str(exc)})


class StagePrologue:
    """The prologue of every `k4d.sim.*` stage around `handle(event, context)`: parse the
    event (a bad payload or job id is InvalidArgument: dead-lettered), skip a job whose
    cancel marker exists (ADR 000), and turn a `Cancelled` raised inside the stage (the
    generator checks the marker between sampler steps) into SimulationFailed{CANCELLED}."""

    def __init__(self, bus: Bus, store, stage: str, event_type, handle: StageHandler):
        self.bus, self.store, self.stage, self.event_type = bus, store, stage, event_type
        self.handle = handle

    def __call__(self, message: Message) -> None:
        # Imported here: k4d.bus.stage_events imports k4d.bus, whose __init__ imports this module.

        event, context = read_stage_event(message, self.event_type, self.stage)
        if is_cancelled(self.store, context.job_id):
            publish_cancelled(self.bus, context)
            return
        try:
            self.handle(event, context)
        except Cancelled:
            publish_cancelled(self.bus, context)
