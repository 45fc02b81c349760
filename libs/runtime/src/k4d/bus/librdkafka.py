"""Settings for librdkafka clients (confluent-kafka, kcat, rdkafka bindings) on our brokers.

Our own bus speaks Kafka through kafka-python (k4d.bus.kafka); code outside the platform
often uses confluent-kafka. `librdkafka_config(config, group_id=...)` gives such a client
the platform's group timeouts instead of librdkafka's defaults.

Why it matters (docs/adr/013-local-kafka-broker-and-clients.md): the local broker, tansu
0.6.0, answers a new member's second JoinGroup only after about half its
`session.timeout.ms`. librdkafka's default of 45 s made a confluent-kafka consumer group
take 23 s to join; 6 s (`k4d up`'s K4D_KAFKA_SESSION_TIMEOUT_MS) joins in about 3 s. A
shorter session costs nothing here: librdkafka heartbeats from its own thread, so only a
process that is gone (or frozen) misses them; how long a handler may work on one message is
`max.poll.interval.ms`.
"""

from __future__ import annotations


def librdkafka_config(config, *, group_id: str | None = None, client_id: str | None = None,
                      from_beginning: bool = True) -> dict[str, str | int | bool]:
    """librdkafka properties for `config` (a k4d.config.Config): the bootstrap servers and,
    for a consumer (`group_id`), the platform's session, heartbeat and poll-interval
    settings, manual commits as our StageWorker does, and where a new group starts."""
    settings: dict[str, str | int | bool] = {
        "bootstrap.servers": config.kafka_bootstrap,
        "client.id": client_id or config.service_name,
    }
    if group_id is not None:
        session_ms = config.kafka_session_timeout_ms
        settings.update({
            "group.id": group_id,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 3),
            "max.poll.interval.ms": config.kafka_max_poll_interval_ms,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
        })
    return settings
