"""Kafka bus on `kafka-python`: producer with acks=all and retries, consumers in groups
with auto-commit off (the stage worker commits after the handler stored its work)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from k4d.bus.base import Bus, CommitFailed, Consumer, Message, topic_list
from k4d.errors import Unavailable

SEND_TIMEOUT_S = 30.0


class KafkaBus(Bus):
    def __init__(self, bootstrap: str, *, client_id: str = "k4d", partitions: int = 1,
                 session_timeout_ms: int = 10_000, max_poll_interval_ms: int = 300_000):
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.partitions = partitions
        self.session_timeout_ms = session_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self._lock = threading.Lock()
        self._producer = None
        self._admin = None
        self._known_topics: set[str] = set()

    @classmethod
    def from_config(cls, config) -> KafkaBus:
        return cls(config.kafka_bootstrap, client_id=config.service_name,
                   partitions=config.kafka_partitions,
                   session_timeout_ms=config.kafka_session_timeout_ms,
                   max_poll_interval_ms=config.kafka_max_poll_interval_ms)

    def _get_producer(self):
        from kafka import KafkaProducer

        with self._lock:
            if self._producer is None:
                # acks=all + the idempotent producer: a retried send is written once.
                self._producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, client_id=self.client_id, acks="all",
                    enable_idempotence=True, retries=5, retry_backoff_ms=200, linger_ms=0)
            return self._producer

    def ensure_topics(self, topics: Iterable[str]) -> None:
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError, TopicAlreadyExistsError

        missing = sorted({t for t in topics if t not in self._known_topics})
        if not missing:
            return
        with self._lock:
            try:
                if self._admin is None:
                    self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap,
                                                   client_id=f"{self.client_id}-admin")
                result = self._admin.create_topics(
                    {t: {"num_partitions": self.partitions, "replication_factor": 1} for t in missing},
                    raise_errors=False)
            except KafkaError as exc:
                raise Unavailable(f"Kafka at {self.bootstrap}: cannot create topics: {exc}") from exc
            for topic in result["topics"]:
                code = topic["error_code"]
                if code not in (0, TopicAlreadyExistsError.errno):
                    raise Unavailable(f"Kafka at {self.bootstrap}: cannot create topic {topic['name']}: "
                                      f"error {code} {topic.get('error_message') or ''}".rstrip())
                self._known_topics.add(topic["name"])

    def _send(self, topic, key, value, headers):
        from kafka.errors import KafkaError

        self.ensure_topics([topic])
        try:
            future = self._get_producer().send(topic, key=key, value=value,
                                               headers=list(headers.items()))
            future.get(timeout=SEND_TIMEOUT_S)
        except KafkaError as exc:
            raise Unavailable(f"Kafka at {self.bootstrap}: publish to {topic} failed: {exc}") from exc

    def consumer(self, topics: str | Sequence[str], group_id: str, *, from_beginning: bool = True):
        from kafka import KafkaConsumer

        topics = topic_list(topics)
        self.ensure_topics(topics)
        raw = KafkaConsumer(
            *topics, bootstrap_servers=self.bootstrap, client_id=self.client_id,
            group_id=group_id, enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=max(100, self.session_timeout_ms // 3),
            max_poll_interval_ms=self.max_poll_interval_ms)
        return KafkaBusConsumer(raw)

    def reader(self, topics: str | Sequence[str]) -> KafkaBusConsumer:
        import time

        from kafka import KafkaConsumer, TopicPartition

        topics = topic_list(topics)
        self.ensure_topics(topics)
        # group_id=None: no group coordinator, no offsets stored on the broker.
        raw = KafkaConsumer(bootstrap_servers=self.bootstrap, client_id=self.client_id,
                            group_id=None, enable_auto_commit=False,
                            auto_offset_reset="earliest")
        partitions: list[TopicPartition] = []
        deadline = time.monotonic() + SEND_TIMEOUT_S
        for topic in topics:
            ids = raw.partitions_for_topic(topic)
            while not ids and time.monotonic() < deadline:  # metadata of a new topic
                time.sleep(0.1)
                raw.poll(timeout_ms=0)
                ids = raw.partitions_for_topic(topic)
            if not ids:
                raw.close()
                raise Unavailable(f"Kafka at {self.bootstrap}: no partitions for {topic}")
            partitions += [TopicPartition(topic, p) for p in sorted(ids)]
        raw.assign(partitions)
        raw.seek_to_beginning(*partitions)
        return KafkaBusConsumer(raw)

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(SEND_TIMEOUT_S)
                self._producer.close()
                self._producer = None
            if self._admin is not None:
                self._admin.close()
                self._admin = None


class KafkaBusConsumer(Consumer):
    def __init__(self, raw):
        self._raw = raw

    def poll(self, timeout_s: float, max_records: int = 1) -> list[Message]:
        batches = self._raw.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        return [Message(r.topic, r.partition, r.offset, r.key, r.value or b"",
                        {k: v or b"" for k, v in (r.headers or [])})
                for records in batches.values() for r in records]

    def commit(self, message: Message) -> None:
        from kafka import OffsetAndMetadata, TopicPartition
        from kafka.errors import CommitFailedError, KafkaError

        tp = TopicPartition(message.topic, message.partition)
        try:
            self._raw.commit({tp: OffsetAndMetadata(message.offset + 1, "", -1)})
        except (CommitFailedError, KafkaError) as exc:
            raise CommitFailed(f"commit of {message.topic}[{message.partition}]@{message.offset} "
                               f"failed: {exc}") from exc

    def has_assignment(self) -> bool:
        return bool(self._raw.assignment())

    def end_offsets(self) -> dict[tuple[str, int], int]:
        ends = self._raw.end_offsets(list(self._raw.assignment()))
        return {(tp.topic, tp.partition): int(offset) for tp, offset in ends.items()}

    def positions(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): int(self._raw.position(tp))
                for tp in self._raw.assignment()}

    def close(self) -> None:
        self._raw.close(autocommit=False)
