"""What a run reports, on rank 0: metrics.jsonl lines, status.json, TensorBoard events,
Prometheus gauges, progress events on `k4d.train.events`, a tqdm bar, and loss-curve PNGs
at the end. Other ranks get `NullReporter`, so the training loop never branches on rank.

Files are written in a local folder first when the run lives on S3 (TensorBoard and
appending need a file system) and mirrored to the run directory as they change.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from k4d_trainer.runs import METRICS_FILE, RunDir, RunStatus, sample_lines, step_lines

log = logging.getLogger("k4d.trainer")
LOSS_PNG = "loss.png"
LR_PNG = "lr.png"


class NullReporter:
    """A reporter that reports nothing (ranks other than 0)."""

    def start(self, status: RunStatus, resumed_step: int) -> None: ...
    def step(self, metrics: dict) -> None: ...
    def sample(self, figures: dict) -> None: ...
    def status(self, status: RunStatus, force: bool = False) -> None: ...
    def close(self, status: RunStatus) -> None: ...


class RunReporter(NullReporter):
    def __init__(self, run: RunDir, total_steps: int, *, job_id: str, tensorboard: bool = True,
                 prometheus_port: int | None = None, bus=None, event_every: int = 10,
                 progress_bar: bool = True):
        self.run, self.total_steps, self.job_id = run, total_steps, job_id
        remote = run.uri.startswith("s3://")
        self._staging = Path(tempfile.mkdtemp(prefix="k4d-run-")) if remote else None
        self.local = self._staging or Path(run.path)
        self.local.mkdir(parents=True, exist_ok=True)
        self.lines: list[dict] = []
        self.bus, self.event_every = bus, event_every
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.local / "tensorboard"))
        self._prom = _PrometheusGauges(prometheus_port) if prometheus_port is not None else None
        self._bar = None
        if progress_bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, desc="train", unit="step", dynamic_ncols=True)
        self._last_status_write = 0.0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, status: RunStatus, resumed_step: int) -> None:
        """Keep the metrics lines up to the resumed step (a killed run may have logged steps
        past its last checkpoint; they are recomputed)."""
        self.lines = [m for m in self.run.read_metrics() if m.get("step", 0) <= resumed_step]
        self._write_metrics()
        if self._bar is not None:
            self._bar.update(resumed_step)
        self.status(status, force=True)

    def step(self, metrics: dict) -> None:
        self._append(metrics)
        step = metrics["step"]
        if self._tb is not None:
            for key in ("loss", "lr", "grad_norm", "samples_per_s", "peak_mem_bytes"):
                if metrics.get(key) is not None:
                    self._tb.add_scalar(f"train/{key}", metrics[key], step)
        if self._prom is not None:
            self._prom.update(metrics)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{metrics['loss']:.4f}")

    def sample(self, figures: dict) -> None:
        """A `kind: "sample"` line of the sample-based progress (k4d_trainer.progress)."""
        self._append(figures)
        if self._tb is not None:
            for key, value in figures.items():
                if key not in ("kind", "step") and isinstance(value, float):
                    self._tb.add_scalar(f"sample/{key}", value, figures["step"])

    def status(self, status: RunStatus, force: bool = False) -> None:
        """status.json at most every 0.5 s during training, always when forced."""
        now = time.monotonic()
        if force or now - self._last_status_write >= 0.5:
            self.run.write_status(status)
            self._last_status_write = now
        if force or status.step % self.event_every == 0:
            self._event(status)

    def close(self, status: RunStatus) -> None:
        """The metrics and the end state first, then the pictures and uploads: after a
        SIGTERM the launcher kills what is still running when its grace period ends, and a
        run killed while plotting must not stay `running` (status.json is the record)."""
        if self._bar is not None:
            self._bar.close()
        self._write_metrics()
        self.run.write_status(status)
        if self._tb is not None:
            self._tb.close()
        try:
            write_loss_curves(self.lines, self.local)
        except Exception as exc:  # a plot must not turn a finished run into a failed one
            log.warning("loss curves not written: %s", exc)
        if self.run.uri.startswith("s3://"):
            for path in self.local.rglob("*"):
                if path.is_file() and path.name != METRICS_FILE:
                    self.run.put_file(str(path), path.relative_to(self.local).as_posix())
        self._event(status)
        if self._prom is not None:
            self._prom.close()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------

    def _append(self, line: dict) -> None:
        self.lines.append(line)
        if self.run.uri.startswith("s3://"):
            self._write_metrics()
        else:
            with open(self.local / METRICS_FILE, "a") as f:
                f.write(json.dumps(line) + "\n")

    def _write_metrics(self) -> None:
        data = "".join(json.dumps(m) + "\n" for m in self.lines).encode()
        self.run.write_bytes(METRICS_FILE, data)

    def _event(self, status: RunStatus) -> None:
        if self.bus is None:
            return
        try:
            publish_training_event(self.bus, self.job_id, self.run.uri, status)
        except Exception as exc:  # the bus is best-effort; status.json is the record
            log.warning("training event not published: %s", exc)


def publish_training_event(bus, job_id: str, run_uri: str, status: RunStatus) -> None:
    """TrainingEvent on `k4d.train.events`, keyed by the job id."""
    from google.protobuf.timestamp_pb2 import Timestamp
    from k4d.bus import event_headers
    from k4d.bus.topics import TRAIN_EVENTS
    from kinema4d.v1 import common_pb2, events_pb2, trainer_pb2

    created = Timestamp()
    created.GetCurrentTime()
    state = getattr(trainer_pb2, f"TRAINING_STATE_{status.state.upper()}")
    event = events_pb2.TrainingEvent(
        header=events_pb2.EventHeader(job_id=job_id, stage="trainer", attempt=1,
                                      created_at=created),
        state=state, step=status.step, loss=status.loss or 0.0,
        checkpoint_uri=status.checkpoint_uri or "", total_steps=status.total_steps,
        run_uri=run_uri)
    if status.error:
        code = "CANCELLED" if status.state == "cancelled" else "INTERNAL"
        event.error.CopyFrom(common_pb2.ErrorInfo(code=code, message=status.error,
                                                  stage="trainer"))
    if status.published_model:
        event.published_model.CopyFrom(common_pb2.ModelRef(
            name=status.published_model["name"], version=status.published_model["version"]))
    bus.publish(TRAIN_EVENTS, job_id, event.SerializeToString(), event_headers(job_id=job_id))


class _PrometheusGauges:
    """k4d_train_* gauges on their own registry, served on `port` (0 = any free port)."""

    def __init__(self, port: int):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.registry = CollectorRegistry()
        self.gauges = {key: Gauge(f"k4d_train_{key}", doc, registry=self.registry)
                       for key, doc in (("step", "optimizer steps done"),
                                        ("loss", "training loss of the last step"),
                                        ("lr", "learning rate"),
                                        ("grad_norm", "gradient norm before clipping"),
                                        ("samples_per_s", "training throughput, all ranks"),
                                        ("peak_mem_bytes", "peak memory of rank 0"))}
        self.server, self.thread = start_http_server(port, registry=self.registry)
        self.port = self.server.server_port

    def update(self, metrics: dict) -> None:
        for key, gauge in self.gauges.items():
            if metrics.get(key) is not None:
                gauge.set(metrics[key])

    def close(self) -> None:
        self.server.shutdown()


def write_loss_curves(lines: list[dict], folder: Path) -> list[Path]:
    """loss.png (raw + smoothed; with sample lines a second panel of their figures) and
    lr.png from the metrics lines."""
    samples = sample_lines(lines)
    lines = step_lines(lines)
    if not lines:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = np.array([m["step"] for m in lines])
    loss = np.array([m["loss"] for m in lines], dtype=float)
    written = []
    if samples:
        fig, (ax, lower) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
        _sample_panel(lower, samples)
    else:
        fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, loss, alpha=0.35, label="loss")
    window = max(1, len(loss) // 20)
    if window > 1:
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, label=f"mean of {window}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("flow-matching MSE")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(folder / LOSS_PNG, dpi=100)
    plt.close(fig)
    written.append(folder / LOSS_PNG)
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(steps, [m["lr"] for m in lines])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(folder / LR_PNG, dpi=100)
    plt.close(fig)
    written.append(folder / LR_PNG)
    return written


def _sample_panel(ax, samples: list[dict]) -> None:
    """The sample-based progress (k4d_trainer.progress): sample PSNR against the VAE's
    reconstruction (dB, left) and the x0 error at sigma = 1 beside predicting zero (right)."""
    steps = [m["step"] for m in samples]
    for key, label in (("sample_psnr_db", "sample PSNR"),
                       ("sample_static_psnr_db", "sample PSNR, static pixels")):
        ax.plot(steps, [m.get(key) if m.get(key) is not None else float("nan")
                        for m in samples], marker="o", label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("dB against the VAE's reconstruction")
    ax.grid(alpha=0.3)
    errors = ax.twinx()
    errors.plot(steps, [m["x0_error_sigma1"] for m in samples], color="tab:red", marker="s",
                label="x0 error at sigma 1")
    errors.plot(steps, [m["x0_error_sigma1_zero"] for m in samples], color="tab:red",
                linestyle=":", label="predicting zero")
    errors.set_ylabel("x0 MSE")
    handles = ax.get_legend_handles_labels()
    more = errors.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=8)
