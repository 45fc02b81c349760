"""The run directory: what a training run writes and what the control plane reads.

A run lives at a URI (`file:///...`, a path, or `s3://bucket/prefix`):

    RUN_URI/status.json      {"state", "step", "total_steps", "loss", "checkpoint_uri",
                              "published_model", "error", "updated_at"}, replaced atomically
    RUN_URI/metrics.jsonl    one JSON line per optimizer step (rank 0), and a line with
                             `"kind": "sample"` per sample-based measurement
                             (k4d_trainer.progress; `step_lines` / `sample_lines` split them)
    RUN_URI/samples/         the measurements' pictures, step-XXXXXXXX.png
    RUN_URI/cancel           marker: the run checkpoints at the next step boundary and ends
                             with state "cancelled"
    RUN_URI/checkpoints/     torch.distributed.checkpoint states (k4d_trainer.checkpoint)
    RUN_URI/tensorboard/ loss.png ...

`read_status`, `read_metrics` and `request_cancel` are the control plane's side of this
contract; `RunDir` is the trainer's.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from k4d.errors import InvalidArgument, NotFound

from k4d_trainer import uris

STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
CANCEL_FILE = "cancel"
SAMPLE_KIND = "sample"  # metrics.jsonl lines of the sample-based progress figures
STATES = ("running", "succeeded", "failed", "cancelled")
TERMINAL_STATES = ("succeeded", "failed", "cancelled")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class RunStatus:
    """The state of one run as written to status.json."""

    state: str = "running"
    step: int = 0
    total_steps: int = 0
    loss: float | None = None
    checkpoint_uri: str | None = None
    published_model: dict | None = None  # {"name": ..., "version": ...}
    error: str | None = None
    updated_at: str = field(default_factory=_now)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunStatus:
        if not isinstance(data, dict) or data.get("state") not in STATES:
            raise InvalidArgument.for_field("status", f"not a run status: {str(data)[:200]}")
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in fields})


class RunDir:
    """A run directory on a filesystem (local or S3)."""

    def __init__(self, uri: str, config=None):
        self.uri = uris.normalize(uri)
        self.fs, self.path = uris.filesystem(self.uri, config)
        self.storage_options = uris.storage_options(self.uri, config)

    def child(self, name: str) -> str:
        """URI of a file or folder inside the run."""
        return f"{self.uri}/{name}"

    def _p(self, name: str) -> str:
        return f"{self.path}/{name}"

    def exists(self, name: str) -> bool:
        return self.fs.exists(self._p(name))

    def read_bytes(self, name: str) -> bytes:
        try:
            return self.fs.cat_file(self._p(name))
        except FileNotFoundError:
            raise NotFound(f"{self.child(name)} not found") from None

    def write_bytes(self, name: str, data: bytes) -> None:
        uris.write_atomic(self.fs, self._p(name), data)

    def put_file(self, local_path: str, name: str) -> None:
        self.fs.put_file(local_path, self._p(name))

    def remove(self, name: str) -> None:
        if self.fs.exists(self._p(name)):
            self.fs.rm(self._p(name), recursive=True)

    # -- status -----------------------------------------------------------------------

    def write_status(self, status: RunStatus) -> None:
        status.updated_at = _now()
        data = status.to_dict()
        if data["loss"] is not None and not math.isfinite(data["loss"]):
            data["loss"] = None  # JSON has no NaN; a diverged run says so in `error`
        self.write_bytes(STATUS_FILE, json.dumps(data, indent=2).encode())

    def read_status(self) -> RunStatus:
        raw = self.read_bytes(STATUS_FILE)
        try:
            return RunStatus.from_dict(json.loads(raw))
        except ValueError as exc:
            raise InvalidArgument.for_field("status", f"{self.child(STATUS_FILE)} is not a run "
                                                      f"status: {exc}") from None

    # -- metrics ----------------------------------------------------------------------

    def read_metrics(self) -> list[dict]:
        try:
            raw = self.read_bytes(METRICS_FILE)
        except NotFound:
            return []
        return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]

    # -- cancellation -----------------------------------------------------------------

    def request_cancel(self) -> None:
        self.write_bytes(CANCEL_FILE, json.dumps({"requested_at": _now()}).encode())

    def cancel_requested(self) -> bool:
        return self.exists(CANCEL_FILE)


def step_lines(lines: list[dict]) -> list[dict]:
    """The metrics lines of optimizer steps (loss, lr, ...), without the sample lines."""
    return [m for m in lines if "kind" not in m]


def sample_lines(lines: list[dict]) -> list[dict]:
    """The metrics lines of the sample-based progress measurements (k4d_trainer.progress)."""
    return [m for m in lines if m.get("kind") == SAMPLE_KIND]


def read_status(run_uri: str, config=None) -> RunStatus:
    """The run's current status; NotFound while the run has not written one yet."""
    return RunDir(run_uri, config).read_status()


def read_metrics(run_uri: str, config=None) -> list[dict]:
    """Every metrics line written so far (one per optimizer step, and the sample lines:
    `step_lines` / `sample_lines`), oldest first."""
    return RunDir(run_uri, config).read_metrics()


def request_cancel(run_uri: str, config=None) -> None:
    """Ask a run to stop: it checkpoints at its next step boundary and ends `cancelled`.
    Idempotent; a run that already ended ignores it."""
    RunDir(run_uri, config).request_cancel()
