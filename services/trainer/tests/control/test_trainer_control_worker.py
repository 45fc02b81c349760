"""The trainer worker with the real launcher and the real `k4d train` (in-process bus, local
store): a run that fails reports its error; a cancelled job never starts; a bad spec in an
event fails the job without a launch; a redelivered request launches nothing; a run killed
before it wrote a status is resumed (--resume) and, killed again past the restart budget,
recorded FAILED; a run the trainer stopped at shutdown is resumed by the next trainer."""

import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from k4d.bus import InProcessBus, StageWorker
from k4d.bus.topics import TRAIN_EVENTS, TRAIN_REQUESTED
from k4d.config import Config
from k4d.settings import TrainerSettings
from k4d.store import LocalStore
from k4d_trainer.control import jobs
from k4d_trainer.control.api import TrainerServicer
from k4d_trainer.control.events import publish_requested
from k4d_trainer.control.records import JobRecords
from k4d_trainer.control.worker import TrainerWorker, launch_key
from kinema4d.v1 import common_pb2, events_pb2, trainer_pb2

T = trainer_pb2.TrainingState
RUN_TIMEOUT_S = 240


def tiny_spec(dataset_uri: str, **overrides) -> trainer_pb2.TrainingJobSpec:
    recipe = {"model": {"size": "tiny", "num_frames": 5, "height": 32, "width": 48},
              "training": {"global_batch_size": 2, "lr": 1e-3, "warmup_steps": 1},
              "vae": {"steps": 1}, "checkpoint": {"every": 1},
              "observability": {"tensorboard": False}}
    fields = dict(recipe="from-scratch", dataset_uri=dataset_uri, output_model_name="tiny-demo",
                  num_steps=2, world_size=1, recipe_json=json.dumps(recipe))
    fields.update(overrides)
    return trainer_pb2.TrainingJobSpec(**fields)


class Harness:
    """Servicer + worker on one in-process bus and local store; the worker is driven by
    hand (handle one message, poll) so each test decides what happens when."""

    def __init__(self, tmp_path: Path, **settings):
        self.bus, self.store = InProcessBus(), LocalStore(tmp_path / "store")
        config = Config(store_uri=self.store.root.as_uri(), log_level="WARNING")
        self.settings = TrainerSettings(work_dir=tmp_path / "work", poll_s=0.2,
                                        **{"max_restarts": 1, **settings})
        self.servicer = TrainerServicer(self.bus, self.store)
        self.worker = TrainerWorker(config, self.bus, self.store, self.settings)
        self.requests = self.bus.consumer([TRAIN_REQUESTED], "test-worker")
        self.events = self.bus.consumer([TRAIN_EVENTS], "test-events")
        self.records = JobRecords(self.store)

    def submit(self, spec) -> trainer_pb2.TrainingJob:
        return self.servicer.SubmitTrainingJob(
            trainer_pb2.SubmitTrainingJobRequest(spec=spec), None).job

    def next_request(self):
        [message] = self.requests.poll(1.0, max_records=1)
        return message

    def follow_until(self, job_id: str, done, timeout_s: float = RUN_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.worker.poll_once()
            job = self.records.get(job_id)
            if done(job):
                return job
            time.sleep(self.settings.poll_s)
        raise AssertionError(f"timed out; last record: {self.records.get(job_id)}")

    def event_states(self) -> list[int]:
        return [events_pb2.TrainingEvent.FromString(m.value).state
                for m in self.events.poll(0.5, max_records=100)]

    def close(self):
        self.worker.close()


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.close()


def _launch_log(h: Harness, job_id: str) -> str:
    return (h.settings.work_dir / job_id / "train.log").read_text()


def _metric(name: str, **labels) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_failing_run_reports_its_error_once_and_redelivery_launches_nothing(harness, tmp_path):
    launched = _metric("k4d_trainer_launches_total", launcher="local", resume="false")
    failed = _metric("k4d_trainer_jobs_finished_total", state="failed")
    job = harness.submit(tiny_spec((tmp_path / "no-such-dataset").as_uri()))
    message = harness.next_request()
    harness.worker.handle(message)
    harness.worker.handle(message)  # a redelivery while the run is followed
    assert harness.worker.following() == [job.job_id]
    assert _metric("k4d_trainer_runs_followed") == 1
    done = harness.follow_until(job.job_id, lambda j: jobs.is_terminal(j.state))
    assert done.state == T.TRAINING_STATE_FAILED and done.launches == 1
    assert "no-such-dataset" in done.error.message
    assert harness.event_states() == [T.TRAINING_STATE_RUNNING, T.TRAINING_STATE_FAILED]
    assert _launch_log(harness, job.job_id).count("--- launch") == 1
    assert _metric("k4d_trainer_launches_total", launcher="local", resume="false") == launched + 1
    assert _metric("k4d_trainer_jobs_finished_total", state="failed") == failed + 1
    harness.worker.handle(message)  # a redelivery after the end changes nothing
    assert harness.worker.following() == [] and harness.records.get(job.job_id) == done


def test_a_cancelled_job_is_never_started(harness, tmp_path):
    job = harness.submit(tiny_spec((tmp_path / "ds").as_uri()))
    harness.records.request_cancel(job.job_id)  # e.g. Cancel racing the worker
    harness.worker.handle(harness.next_request())
    record = harness.records.get(job.job_id)
    assert record.state == T.TRAINING_STATE_CANCELLED and record.launches == 0
    assert not (harness.settings.work_dir / job.job_id).exists()
    assert harness.event_states() == [T.TRAINING_STATE_CANCELLED]


def test_a_bad_spec_published_by_another_producer_fails_the_job_without_a_launch(harness):
    job_id = jobs.new_job_id()
    bad = trainer_pb2.TrainingJob(job_id=job_id, spec=trainer_pb2.TrainingJobSpec(
        dataset_uri="ftp://x", output_model_name="m", learning_rate=-3.0,
        base_model=common_pb2.ModelRef(name="base")))
    publish_requested(harness.bus, bad)
    harness.worker.handle(harness.next_request())
    record = harness.records.get(job_id)
    assert record.state == T.TRAINING_STATE_FAILED and record.error.code == "INVALID_ARGUMENT"
    assert {v.field for v in record.error.violations} == {"spec.dataset_uri", "spec.learning_rate"}
    assert record.launches == 0


def test_a_killed_run_is_resumed_then_failed_past_the_restart_budget(harness, tmp_path):
    job = harness.submit(tiny_spec((tmp_path / "ds").as_uri()))
    harness.worker.handle(harness.next_request())
    for launch_number in (1, 2):
        launch = json.loads(harness.store.get_bytes(launch_key(job.job_id)))
        assert launch["launches"] == launch_number
        os.killpg(launch["pid"], signal.SIGKILL)  # before it could write any status
        job_now = harness.follow_until(job.job_id, lambda j, n=launch_number: (
            j.launches > n or jobs.is_terminal(j.state)), timeout_s=60)
    assert job_now.state == T.TRAINING_STATE_FAILED and job_now.launches == 2
    assert "without a final status after 1 restart" in job_now.error.message
    log = _launch_log(harness, job.job_id)
    assert "--- launch 1:" in log and "--- launch 2:" in log
    assert "--resume" not in log.split("--- launch 2:")[0] and "--resume" in log.split("--- launch 2:")[1]


def test_a_run_stopped_at_shutdown_is_resumed_by_the_next_trainer(tmp_path):
    first = Harness(tmp_path)
    job = first.submit(tiny_spec((tmp_path / "ds").as_uri()))
    first.worker.handle(first.next_request())
    pid = json.loads(first.store.get_bytes(launch_key(job.job_id)))["pid"]
    first.close()  # SIGTERM to the run; the launch is marked interrupted
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert json.loads(first.store.get_bytes(launch_key(job.job_id)))["interrupted"]

    second = Harness(tmp_path)  # a restarted trainer on the same store
    try:
        second.worker.adopt_unfinished()
        assert second.worker.following() == [job.job_id]
        launch = json.loads(second.store.get_bytes(launch_key(job.job_id)))
        assert launch["launches"] == 2 and not launch["interrupted"]
        assert "--resume" in _launch_log(second, job.job_id).split("--- launch 2:")[1]
        assert second.records.get(job.job_id).state == T.TRAINING_STATE_RUNNING
    finally:
        second.close()


@pytest.mark.slow
def test_cancelling_a_running_job_stops_the_run_at_a_step_boundary(harness, tmp_path):
    from k4d_trainer.synthetic import write_dataset

    dataset = write_dataset(tmp_path / "ds", count=2)
    job = harness.submit(tiny_spec(Path(dataset).as_uri(), num_steps=200))
    harness.worker.handle(harness.next_request())
    harness.follow_until(job.job_id, lambda j: j.step >= 1)
    cancelling = harness.servicer.CancelTrainingJob(
        trainer_pb2.CancelTrainingJobRequest(job_id=job.job_id), None).job
    assert cancelling.state == T.TRAINING_STATE_RUNNING and cancelling.cancel_requested
    done = harness.follow_until(job.job_id, lambda j: jobs.is_terminal(j.state))
    assert done.state == T.TRAINING_STATE_CANCELLED and 1 <= done.step < 200
    assert done.checkpoint_uri  # the run checkpointed where it stopped
    assert harness.event_states()[-1] == T.TRAINING_STATE_CANCELLED


def test_a_run_that_cannot_be_started_fails_the_job_after_the_last_attempt(tmp_path):
    h = Harness(tmp_path)
    h.worker.launcher.command = [str(tmp_path / "no-such-k4d")]  # e.g. a broken image
    h.worker.config = dataclasses.replace(h.worker.config, worker_max_attempts=2)
    job = h.submit(tiny_spec((tmp_path / "ds").as_uri()))
    message = h.next_request()
    stage = StageWorker(h.bus, TRAIN_REQUESTED, "k4d-trainer", h.worker.handle, max_attempts=2,
                        backoff_s=0.01)
    with h.bus.consumer([TRAIN_REQUESTED], "k4d-trainer") as consumer:
        assert stage.process(consumer, message, threading.Event()) == "retry"
        assert h.records.get(job.job_id).state == T.TRAINING_STATE_QUEUED
        (retry,) = consumer.poll(1.0)
        assert stage.process(consumer, retry, threading.Event()) == "dlq"
    record = h.records.get(job.job_id)
    assert record.state == T.TRAINING_STATE_FAILED and record.error.code == "UNAVAILABLE"
    assert "no-such-k4d" in record.error.message
