"""The bus interface: publish with headers; consumers in groups with manual commit.

Delivery is at-least-once: a message is committed only after its handler returned, so a
consumer that dies first leaves it to the next member of its group. Headers are bytes;
the bus writes the W3C `traceparent` of the publishing span itself, so tracing works the
same on Kafka and in-process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry import trace

from k4d.telemetry import inject_trace_headers

HEADER_ATTEMPT = "k4d-attempt"
HEADER_JOB_ID = "k4d-job-id"
HEADER_OWNER = "k4d-owner"  # the job's submitter (issue 47), on every event of the job
HEADER_ERROR = "k4d-error"
HEADER_ERROR_TYPE = "k4d-error-type"
HEADER_ORIGINAL_TOPIC = "k4d-original-topic"
HEADER_ORIGINAL_OFFSET = "k4d-original-offset"


class CommitFailed(Exception):
    """The group rebalanced before the commit; the message will be delivered again."""


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Mapping[str, bytes] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        raw = self.headers.get(name)
        return raw.decode(errors="replace") if raw is not None else None

    @property
    def attempt(self) -> int:
        """1 for the first delivery; retries republish with attempt + 1."""
        try:
            return max(1, int(self.header(HEADER_ATTEMPT) or 1))
        except ValueError:
            return 1

    @property
    def job_id(self) -> str | None:
        return self.header(HEADER_JOB_ID)


def event_headers(job_id: str | None = None, attempt: int = 1, **extra: str) -> dict[str, bytes]:
    """Headers of a new event: job id and attempt number (traceparent is added on publish)."""
    headers = {HEADER_ATTEMPT: str(attempt).encode()}
    if job_id:
        headers[HEADER_JOB_ID] = job_id.encode()
    headers.update({k: v.encode() for k, v in extra.items()})
    return headers


class Consumer(ABC):
    """A member of a consumer group; nothing is committed unless `commit` is called."""

    @abstractmethod
    def poll(self, timeout_s: float, max_records: int = 1) -> list[Message]:
        """Up to `max_records` messages, waiting at most `timeout_s`; [] on timeout."""

    @abstractmethod
    def commit(self, message: Message) -> None:
        """Mark `message` (and everything before it in its partition) done for the group.
        Raises CommitFailed if the partition was reassigned meanwhile."""

    @abstractmethod
    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Leave the group WITHOUT committing; uncommitted messages go to the next member."""

    def has_assignment(self) -> bool:
        """Whether the group has given this member its partitions yet (a Kafka join takes
        seconds); "the topic is quiet" means something only after that."""
        return True

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> offset after its last message now, for every partition
        this consumer reads (a `Bus.reader`; group members need not support it)."""
        raise NotImplementedError(f"{type(self).__name__} does not report end offsets")

    def positions(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> offset of the next message this consumer will return."""
        raise NotImplementedError(f"{type(self).__name__} does not report positions")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Bus(ABC):
    def publish(self, topic: str, key: str | bytes | None, value: bytes,
                headers: Mapping[str, bytes] | None = None) -> None:
        """Send one message and wait until the broker acknowledged it. Adds `traceparent`
        of the current span unless the headers already carry one (retries keep theirs)."""
        all_headers = dict(headers or {})
        with trace.get_tracer("k4d.bus").start_as_current_span(
                f"{topic} publish", kind=trace.SpanKind.PRODUCER,
                attributes={"messaging.destination.name": topic}):
            if "traceparent" not in all_headers:
                inject_trace_headers(all_headers)
            self._send(topic, _as_bytes(key), bytes(value), all_headers)

    @abstractmethod
    def _send(self, topic: str, key: bytes | None, value: bytes, headers: dict[str, bytes]) -> None: ...

    @abstractmethod
    def consumer(self, topics: str | Sequence[str], group_id: str, *,
                 from_beginning: bool = True) -> Consumer:
        """Join `group_id` on `topics`. A partition the group never committed starts at the
        beginning (or at the end with from_beginning=False)."""

    def reader(self, topics: str | Sequence[str]) -> Consumer:
        """Every partition of `topics` from the beginning, in no consumer group: no
        membership, no rebalance, nothing committed. For processes that each fold whole
        topics into their own state (every simulator replica's job feed); `end_offsets`
        and `positions` tell when it has caught up."""
        raise NotImplementedError(f"{type(self).__name__} has no group-less reader")

    @abstractmethod
    def ensure_topics(self, topics: Iterable[str]) -> None:
        """Create the topics if missing (existing ones are fine)."""

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Flush and release connections."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def topic_list(topics: str | Sequence[str]) -> list[str]:
    return [topics] if isinstance(topics, str) else list(topics)
