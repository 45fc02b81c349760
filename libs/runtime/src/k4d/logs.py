"""One structured (JSON lines) log configuration shared by every k4d process.

Each record carries the service, logger, level, message, and, when known, the job id
(`log_context(job_id=...)`) and the current OpenTelemetry trace/span ids.

User-supplied strings (paths, names, error messages that quote them) are cut to a sane
length: `clip` for callers, and the formatter clips the message, every string extra and
every line of a traceback, so one hostile 5 kB path cannot flood the logs.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time

_job_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("k4d_job_id", default=None)
_HANDLER_NAME = "k4d-json"
_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
MAX_LOGGED_CHARS = 500        # one user-supplied value (clip's default)
MAX_MESSAGE_CHARS = 2000      # a log message, a string extra
MAX_TRACEBACK_LINE_CHARS = 1000


def clip(value, limit: int = MAX_LOGGED_CHARS) -> str:
    """`value` as text, cut to `limit` characters with a note of how many were dropped."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more chars]"


@contextlib.contextmanager
def log_context(job_id: str | None):
    """Tag every log record written inside the block with `job_id`."""
    token = _job_id.set(job_id)
    try:
        yield
    finally:
        _job_id.reset(token)


class JsonFormatter(logging.Formatter):
    def __init__(self, service_name: str):
        super().__init__()
        self.service_name = service_name

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                  + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "service": self.service_name,
            "logger": record.name,
            "message": clip(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        job_id = getattr(record, "job_id", None) or _job_id.get()
        if job_id:
            entry["job_id"] = job_id
        entry.update(_trace_ids())
        for key, value in vars(record).items():  # extra={...} fields
            if key not in _STANDARD_ATTRS and key not in entry and not key.startswith("_"):
                if not isinstance(value, (int, float, bool, type(None))):
                    value = clip(value if isinstance(value, str) else repr(value), MAX_MESSAGE_CHARS)
                entry[key] = value
        if record.exc_info:
            entry["exception"] = "\n".join(
                clip(line, MAX_TRACEBACK_LINE_CHARS)
                for line in self.formatException(record.exc_info).splitlines())
        return json.dumps(entry, ensure_ascii=False)


def _trace_ids() -> dict[str, str]:
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def configure_logging(level: str = "INFO", service_name: str = "k4d", stream=None) -> None:
    """Install the JSON handler on the root logger (idempotent: replaces our own
    handler, leaves others alone, e.g. pytest's capture)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter(service_name))
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("kafka", "urllib3", "botocore", "werkzeug"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def get_logger(name: str) -> logging.Logger:
    """A logger; records are formatted by the shared configuration above."""
    return logging.getLogger(name)
