"""Process configuration: the runtime section of the settings (`k4d.settings`), parsed once
at start-up from env vars (+ CLI overrides), and the machinery every section is declared with.

Each setting is a dataclass field made by `setting(VAR, default, doc)`: its variable, type,
default and one-line description in one place. docs/configuration.md lists them all and a
contract test checks that both agree. Code reads a `Config` that is passed down (or a
`k4d.settings.current()` section); nothing else reads `os.environ` for K4D_* (ADR 022).
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from k4d.errors import InvalidArgument

MIB = 1 << 20
MAX_PORT = 65535
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Default ports per service (docs/configuration.md, "Service ports").
SERVICE_PORTS: dict[str, tuple[int, int]] = {
    "kinematics": (50051, 9101),
    "projection": (50052, 9102),
    "generator": (50053, 9103),
    "simulator": (50054, 9104),
    "trainer": (50055, 9105),
}

Parser = Callable[[str, str], object]


def default_store_uri() -> str:
    return (Path.home() / ".k4d" / "store").resolve().as_uri()


# --- parsers: (variable name, raw value) -> value, or InvalidArgument naming the variable ---


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


def float_at_least(low: float) -> Parser:
    """A parser of finite numbers >= `low` (a poll interval that must not spin)."""
    def parse(name: str, raw: str) -> float:
        value = _parse_float(name, raw)
        if value < low:
            raise InvalidArgument.for_field(name, f"expected a number >= {low:g}, got {raw!r}")
        return value
    return parse


def _parse_str(name: str, raw: str) -> str:
    return raw.strip()


def _parse_path(name: str, raw: str) -> Path:
    return Path(raw.strip()).expanduser()


def _parse_level(name: str, raw: str) -> str:
    level = raw.strip().upper()
    if level not in LOG_LEVELS:
        raise InvalidArgument.for_field(name, f"expected DEBUG/INFO/WARNING/ERROR, got {raw!r}")
    return level


def _parse_store_uri(name: str, raw: str) -> str:
    uri = raw.strip()
    if not (uri.startswith("file://") or uri.startswith("s3://")):
        raise InvalidArgument.for_field(name, f"expected file:///path or s3://bucket, got {raw!r}")
    return uri


def _choice_parser(choices: tuple[str, ...]) -> Parser:
    def parse(name: str, raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise InvalidArgument.for_field(name, f"expected one of {', '.join(choices)}, "
                                                  f"got {raw[:100]!r}")
        return value
    return parse


_PARSERS: dict[object, Parser] = {str: _parse_str, int: _parse_int, float: _parse_float,
                                  bool: _parse_bool, Path: _parse_path}


# --- declaring and reading settings ---------------------------------------------------------


def setting(env: str | tuple[str, ...], default=dataclasses.MISSING, doc: str = "", *,
            parse: Parser | None = None, choices: tuple[str, ...] = (),
            default_factory=dataclasses.MISSING):
    """A dataclass field read from the variable `env` (a tuple: several, the last one set
    wins) with its one-line `doc`. `parse(var, raw)` defaults to the field's type's parser;
    `choices` makes a str an enum."""
    meta = {"env": (env,) if isinstance(env, str) else tuple(env), "doc": doc,
            "parse": parse, "choices": tuple(choices)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _base_type(annotation) -> object:
    """`int | None` -> int; other annotations as they are."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def type_name(cls: type, field: dataclasses.Field) -> str:
    """What docs/configuration.md's type column says for a setting: str, int, float, bool,
    Path or enum."""
    if field.metadata.get("choices"):
        return "enum"
    return getattr(_base_type(typing.get_type_hints(cls)[field.name]), "__name__", "str")


def env_vars(cls: type) -> dict[str, tuple[str, Parser]]:
    """variable -> (field name, parser) of a settings dataclass, in declaration order."""
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[str, Parser]] = {}
    for f in dataclasses.fields(cls):
        if "env" not in f.metadata:
            continue
        parse = f.metadata["parse"]
        if parse is None:
            parse = (_choice_parser(f.metadata["choices"]) if f.metadata["choices"]
                     else _PARSERS[_base_type(hints[f.name])])
        for var in f.metadata["env"]:
            out[var] = (f.name, parse)
    return out


def env_values(cls: type, env: Mapping[str, str]) -> dict[str, object]:
    """The fields of `cls` that `env` sets (non-empty), parsed; a malformed value raises
    InvalidArgument naming its variable."""
    values: dict[str, object] = {}
    for var, (field, parse) in env_vars(cls).items():
        raw = env.get(var)
        if raw is not None and raw != "":
            values[field] = parse(var, raw)
    return values


def parse_section(cls: type, env: Mapping[str, str] | None = None):
    """A settings dataclass from the environment (os.environ unless `env` is given)."""
    return cls(**env_values(cls, os.environ if env is None else env))


@dataclass(frozen=True)
class Config:
    """Runtime settings (the `runtime` section of k4d.settings)."""

    service_name: str = setting(("K4D_SERVICE_NAME", "OTEL_SERVICE_NAME"), "k4d",
                                "name in logs, spans and metrics (OTEL_SERVICE_NAME wins)")
    grpc_host: str = setting("K4D_GRPC_HOST", "127.0.0.1", "bind address of gRPC and /metrics")
    grpc_port: int = setting("K4D_GRPC_PORT", 0, "gRPC port; 0 = any free port",
                             parse=parse_port)
    metrics_port: int = setting("K4D_METRICS_PORT", 0, "/metrics port; 0 = disabled",
                                parse=parse_port)
    grpc_max_message_bytes: int = setting("K4D_GRPC_MAX_MESSAGE_BYTES", 64 * MIB,
                                          "largest gRPC message sent or received")
    grpc_max_workers: int = setting("K4D_GRPC_MAX_WORKERS", 8, "gRPC handler threads")
    kafka_bootstrap: str = setting("K4D_KAFKA_BOOTSTRAP", "",
                                   "host:port of the broker; empty = in-process bus")
    kafka_session_timeout_ms: int = setting("K4D_KAFKA_SESSION_TIMEOUT_MS", 10_000,
                                            "consumer group session timeout")
    kafka_max_poll_interval_ms: int = setting("K4D_KAFKA_MAX_POLL_INTERVAL_MS", 300_000,
                                              "longest a handler may take on one message")
    kafka_partitions: int = setting("K4D_KAFKA_PARTITIONS", 1,
                                    "partitions of the topics the runtime creates")
    store_uri: str = setting("K4D_STORE_URI", doc="object store: file:///dir or s3://bucket",
                             parse=_parse_store_uri, default_factory=default_store_uri)
    s3_endpoint: str = setting("K4D_S3_ENDPOINT", "", "host:port of the S3 API")
    s3_access_key: str = setting("K4D_S3_ACCESS_KEY", "", "S3 access key")
    s3_secret_key: str = setting("K4D_S3_SECRET_KEY", "", "S3 secret key")
    s3_secure: bool = setting("K4D_S3_SECURE", False, "HTTPS to the S3 endpoint")
    s3_region: str = setting("K4D_S3_REGION", "us-east-1", "S3 region")
    s3_part_size_bytes: int = setting("K4D_S3_PART_SIZE_BYTES", 16 * MIB,
                                      "multipart upload part size")
    s3_retries: int = setting("K4D_S3_RETRIES", 4, "attempts per S3 operation")
    inline_limit_bytes: int = setting("K4D_INLINE_LIMIT_BYTES", 1 * MIB,
                                      "largest array sent inline, not by reference")
    worker_max_attempts: int = setting("K4D_WORKER_MAX_ATTEMPTS", 3,
                                       "stage worker attempts per message before the DLQ")
    worker_backoff_s: float = setting("K4D_WORKER_BACKOFF_S", 1.0,
                                      "stage worker first retry delay")
    log_level: str = setting("K4D_LOG_LEVEL", "INFO", "log level", parse=_parse_level,
                             choices=LOG_LEVELS)
    shutdown_grace_s: float = setting("K4D_SHUTDOWN_GRACE_S", 20.0,
                                      "on SIGTERM: time to finish messages and RPCs")
    otel_exporter_otlp_endpoint: str = setting("OTEL_EXPORTER_OTLP_ENDPOINT", "",
                                               "OTLP/gRPC endpoint spans go to")
    otel_traces_exporter: str = setting("OTEL_TRACES_EXPORTER", "",
                                        "span exporter: otlp, console or none")
    # Security (docs/operations.md, "Security"): TLS files, the token table, the token.
    tls_cert: str = setting("K4D_TLS_CERT", "", "PEM certificate chain (server; client mTLS)")
    tls_key: str = setting("K4D_TLS_KEY", "", "the PEM private key of K4D_TLS_CERT")
    tls_client_ca: str = setting("K4D_TLS_CLIENT_CA", "",
                                 "server: CA client certificates must chain to (mTLS)")
    tls_ca: str = setting("K4D_TLS_CA", "", "client: CA the server certificate must chain to")
    auth_tokens: str = setting("K4D_AUTH_TOKENS", "",
                               "server: file of ROLE NAME SHA256-OF-TOKEN lines")
    token: str = setting("K4D_TOKEN", "", "client: the bearer token it sends")

    def replace(self, **changes) -> Config:
        """A copy with some fields changed (CLI flag overrides); None values are ignored."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


# env var -> (field, parser), derived from the fields above.
ENV_VARS: dict[str, tuple[str, Parser]] = env_vars(Config)


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
    values.update(env_values(Config, env))
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
