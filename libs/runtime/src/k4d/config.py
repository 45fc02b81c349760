"""Process configuration, parsed once at start-up from env vars (+ CLI overrides).

Every setting is listed in docs/configuration.md. Code reads a `Config` object that
is passed down; nothing else reads `os.environ` for these settings.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from k4d.errors import InvalidArgument

MIB = 1 << 20

# Default ports per service (docs/configuration.md, "Service ports").
SERVICE_PORTS: dict[str, tuple[int, int]] = {
    "kinematics": (50051, 9101),
    "projection": (50052, 9102),
    "generator": (50053, 9103),
    "simulator": (50054, 9104),
    "trainer": (50055, 9105),
}


def default_store_uri() -> str:
    return (Path.home() / ".k4d" / "store").resolve().as_uri()


@dataclass(frozen=True)
class Config:
    """Runtime settings; field docs are in docs/configuration.md."""

    service_name: str = "k4d"
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 0
    metrics_port: int = 0
    grpc_max_message_bytes: int = 64 * MIB
    grpc_max_workers: int = 8
    kafka_bootstrap: str = ""
    kafka_session_timeout_ms: int = 10_000
    kafka_max_poll_interval_ms: int = 300_000
    kafka_partitions: int = 1
    store_uri: str = dataclasses.field(default_factory=default_store_uri)
    s3_endpoint: str = ""
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_secure: bool = False
    s3_region: str = "us-east-1"
    s3_part_size_bytes: int = 16 * MIB
    s3_retries: int = 4
    inline_limit_bytes: int = 1 * MIB
    worker_max_attempts: int = 3
    worker_backoff_s: float = 1.0
    log_level: str = "INFO"
    shutdown_grace_s: float = 20.0
    otel_exporter_otlp_endpoint: str = ""
    otel_traces_exporter: str = ""
    # Security (docs/operations.md, "Security"): TLS files, the token table, the token.
    tls_cert: str = ""         # server certificate chain (PEM); a client presents it for mTLS
    tls_key: str = ""          # its private key (PEM)
    tls_client_ca: str = ""    # servers: require client certificates signed by this CA
    tls_ca: str = ""           # clients: trust servers signed by this CA (TLS on)
    auth_tokens: str = ""      # servers: file of `ROLE NAME SHA256-OF-TOKEN` lines (auth on)
    token: str = ""            # clients: the bearer token sent in `authorization`

    def replace(self, **changes) -> Config:
        """A copy with some fields changed (CLI flag overrides); None values are ignored."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


# env var -> (field, parser)
def _parse_bool(name: str, raw: str) -> bool:
    if raw.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if raw.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise InvalidArgument.for_field(name, f"expected 0 or 1, got {raw!r}")


def _parse_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument.for_field(name, f"expected an integer, got {raw!r}") from None
    if value < 0:
        raise InvalidArgument.for_field(name, f"must be >= 0, got {value}")
    return value


MAX_PORT = 65535


def parse_port(name: str, raw: str) -> int:
    value = _parse_int(name, raw)
    if value > MAX_PORT:  # gRPC would silently bind value mod 65536
        raise InvalidArgument.for_field(name, f"expected a port in 0..{MAX_PORT}, got {value}")
    return value


def _parse_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument.for_field(name, f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):  # "nan" and "inf" parse, but no timeout or backoff can be one
        raise InvalidArgument.for_field(name, f"expected a finite number, got {raw!r}")
    if value < 0:
        raise InvalidArgument.for_field(name, f"must be >= 0, got {value}")
    return value


def _parse_str(name: str, raw: str) -> str:
    return raw.strip()


def _parse_level(name: str, raw: str) -> str:
    level = raw.strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise InvalidArgument.for_field(name, f"expected DEBUG/INFO/WARNING/ERROR, got {raw!r}")
    return level


def _parse_store_uri(name: str, raw: str) -> str:
    uri = raw.strip()
    if not (uri.startswith("file://") or uri.startswith("s3://")):
        raise InvalidArgument.for_field(name, f"expected file:///path or s3://bucket, got {raw!r}")
    return uri


ENV_VARS: dict[str, tuple[str, object]] = {
    "K4D_SERVICE_NAME": ("service_name", _parse_str),
    "K4D_GRPC_HOST": ("grpc_host", _parse_str),
    "K4D_GRPC_PORT": ("grpc_port", parse_port),
    "K4D_METRICS_PORT": ("metrics_port", parse_port),
    "K4D_GRPC_MAX_MESSAGE_BYTES": ("grpc_max_message_bytes", _parse_int),
    "K4D_GRPC_MAX_WORKERS": ("grpc_max_workers", _parse_int),
    "K4D_KAFKA_BOOTSTRAP": ("kafka_bootstrap", _parse_str),
    "K4D_KAFKA_SESSION_TIMEOUT_MS": ("kafka_session_timeout_ms", _parse_int),
    "K4D_KAFKA_MAX_POLL_INTERVAL_MS": ("kafka_max_poll_interval_ms", _parse_int),
    "K4D_KAFKA_PARTITIONS": ("kafka_partitions", _parse_int),
    "K4D_STORE_URI": ("store_uri", _parse_store_uri),
    "K4D_S3_ENDPOINT": ("s3_endpoint", _parse_str),
    "K4D_S3_ACCESS_KEY": ("s3_access_key", _parse_str),
    "K4D_S3_SECRET_KEY": ("s3_secret_key", _parse_str),
    "K4D_S3_SECURE": ("s3_secure", _parse_bool),
    "K4D_S3_REGION": ("s3_region", _parse_str),
    "K4D_S3_PART_SIZE_BYTES": ("s3_part_size_bytes", _parse_int),
    "K4D_S3_RETRIES": ("s3_retries", _parse_int),
    "K4D_INLINE_LIMIT_BYTES": ("inline_limit_bytes", _parse_int),
    "K4D_WORKER_MAX_ATTEMPTS": ("worker_max_attempts", _parse_int),
    "K4D_WORKER_BACKOFF_S": ("worker_backoff_s", _parse_float),
    "K4D_LOG_LEVEL": ("log_level", _parse_level),
    "K4D_SHUTDOWN_GRACE_S": ("shutdown_grace_s", _parse_float),
    "K4D_TLS_CERT": ("tls_cert", _parse_str),
    "K4D_TLS_KEY": ("tls_key", _parse_str),
    "K4D_TLS_CLIENT_CA": ("tls_client_ca", _parse_str),
    "K4D_TLS_CA": ("tls_ca", _parse_str),
    "K4D_AUTH_TOKENS": ("auth_tokens", _parse_str),
    "K4D_TOKEN": ("token", _parse_str),
    "OTEL_SERVICE_NAME": ("service_name", _parse_str),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("otel_exporter_otlp_endpoint", _parse_str),
    "OTEL_TRACES_EXPORTER": ("otel_traces_exporter", _parse_str),
}


def load_config(service: str | None = None, env: Mapping[str, str] | None = None,
                **overrides) -> Config:
    """Parse the settings once. `service` picks that service's default ports and name
    (the env still wins); `overrides` (CLI flags) win over both; None overrides are ignored.
    Raises InvalidArgument naming the env var on a malformed value."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    if service:
        values["service_name"] = service
        if service in SERVICE_PORTS:
            values["grpc_port"], values["metrics_port"] = SERVICE_PORTS[service]
    for var, (field, parse) in ENV_VARS.items():
        raw = env.get(var)
        if raw is not None and raw != "":
            values[field] = parse(var, raw)
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - {f.name for f in dataclasses.fields(Config)}
    if unknown:
        raise TypeError(f"unknown config fields: {sorted(unknown)}")
    config = Config(**values)
    if bool(config.tls_cert) != bool(config.tls_key):
        raise InvalidArgument.for_field("K4D_TLS_KEY" if config.tls_cert else "K4D_TLS_CERT",
                                        "K4D_TLS_CERT and K4D_TLS_KEY go together")
    if config.tls_client_ca and not config.tls_cert:
        raise InvalidArgument.for_field("K4D_TLS_CLIENT_CA", "mutual TLS needs K4D_TLS_CERT "
                                                             "and K4D_TLS_KEY too")
    for var, value in (("K4D_WORKER_MAX_ATTEMPTS", config.worker_max_attempts),
                       ("K4D_KAFKA_PARTITIONS", config.kafka_partitions)):
        if value < 1:
            raise InvalidArgument.for_field(var, "must be >= 1")
    return config
