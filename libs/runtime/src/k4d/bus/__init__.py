"""Event bus: one interface, Kafka and in-process implementations, and the StageWorker."""

from __future__ import annotations

from k4d.bus import topics
from k4d.bus.base import (
    HEADER_ATTEMPT,
    HEADER_ERROR,
    HEADER_ERROR_TYPE,
    HEADER_JOB_ID,
    HEADER_ORIGINAL_OFFSET,
    HEADER_ORIGINAL_TOPIC,
    Bus,
    CommitFailed,
    Consumer,
    Message,
    event_headers,
)
from k4d.bus.memory import InProcessBus
from k4d.bus.topics import ALL_TOPICS, dlq
from k4d.bus.worker import StageWorker

__all__ = ["ALL_TOPICS", "HEADER_ATTEMPT", "HEADER_ERROR", "HEADER_ERROR_TYPE", "HEADER_JOB_ID",
           "HEADER_ORIGINAL_OFFSET", "HEADER_ORIGINAL_TOPIC", "Bus", "CommitFailed", "Consumer",
           "InProcessBus", "KafkaBus", "Message", "StageWorker", "dlq", "event_headers", "open_bus",
           "topics"]


def __getattr__(name: str):
    if name == "KafkaBus":  # kafka-python is imported only when Kafka is used
        from k4d.bus.kafka import KafkaBus

        return KafkaBus
    raise AttributeError(name)


def open_bus(config) -> Bus:
    """Kafka when config.kafka_bootstrap (K4D_KAFKA_BOOTSTRAP) is set, else in-process."""
    if config.kafka_bootstrap:
        from k4d.bus.kafka import KafkaBus

        return KafkaBus.from_config(config)
    return InProcessBus()
