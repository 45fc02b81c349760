"""What rank 0 reports: metrics.jsonl, status.json, TensorBoard events, Prometheus gauges,
TrainingEvents on the bus, loss-curve PNGs; a resumed run drops the metrics lines past its
checkpoint."""

from __future__ import annotations

import urllib.request

from k4d.bus import InProcessBus
from k4d.bus.topics import TRAIN_EVENTS
from k4d.testing.bus import drain
from k4d_trainer.observe import RunReporter
from k4d_trainer.runs import RunDir, RunStatus, read_metrics, read_status
from kinema4d.v1 import events_pb2, trainer_pb2


def _metrics(step: int) -> dict:
    return {"step": step, "loss": 2.0 / step, "lr": 1e-3, "grad_norm": 0.5,
            "samples_per_s": 4.0, "peak_mem_bytes": 1 << 20}


def test_reporter_writes_every_channel(tmp_path):
    bus = InProcessBus()
    run = RunDir(str(tmp_path / "run"))
    reporter = RunReporter(run, 4, job_id="job-1", tensorboard=True, prometheus_port=0,
                           bus=bus, event_every=2, progress_bar=False)
    status = RunStatus(total_steps=4)
    reporter.start(status, 0)
    for step in range(1, 5):
        reporter.step(_metrics(step))
        status.step, status.loss = step, 2.0 / step
        reporter.status(status)
    body = urllib.request.urlopen(f"http://127.0.0.1:{reporter._prom.port}/metrics").read().decode()
    assert "k4d_train_loss 0.5" in body and "k4d_train_step 4.0" in body
    status.state = "succeeded"
    reporter.close(status)

    assert [m["step"] for m in read_metrics(run.uri)] == [1, 2, 3, 4]
    assert read_status(run.uri).state == "succeeded"
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert (tmp_path / "run" / "loss.png").stat().st_size > 1000
    events = [events_pb2.TrainingEvent.FromString(m.value) for m in drain(bus, TRAIN_EVENTS, 4,
                                                                           timeout_s=5)]
    assert [e.step for e in events] == [0, 2, 4, 4]  # start, every 2 steps, the end
    assert events[-1].state == trainer_pb2.TRAINING_STATE_SUCCEEDED
    assert events[-1].run_uri == run.uri and events[0].header.job_id == "job-1"


def test_resumed_run_drops_metrics_past_the_checkpoint(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    first = RunReporter(run, 6, job_id="j", tensorboard=False, progress_bar=False)
    first.start(RunStatus(total_steps=6), 0)
    for step in range(1, 6):
        first.step(_metrics(step))
    # killed here, the newest checkpoint being step 3
    second = RunReporter(run, 6, job_id="j", tensorboard=False, progress_bar=False)
    second.start(RunStatus(step=3, total_steps=6), 3)
    assert [m["step"] for m in read_metrics(run.uri)] == [1, 2, 3]
    second.step(_metrics(4))
    assert [m["step"] for m in read_metrics(run.uri)] == [1, 2, 3, 4]
