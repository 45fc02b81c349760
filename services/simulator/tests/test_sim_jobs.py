"""JobTable: the state machine folded from k4d.sim.* events."""

import random
import threading

import pytest
from k4d.errors import InvalidArgument, NotFound
from k4d_simulator import events as ev
from k4d_simulator.jobs import JobTable
from kinema4d.v1 import common_pb2, events_pb2, generator_pb2, simulator_pb2

S = simulator_pb2.JobState


def _events(job_id: str, t0: float, *, outcome: str = "completed"):
    """The (topic, payload bytes, headers) a job produces through the pipeline."""
    h = lambda stage, dt: ev.header(job_id, stage, now_s=t0 + dt)  # noqa: E731
    out = [
        (ev.TOPIC_REQUESTED, events_pb2.SimulationRequested(header=h("submit", 0)),
         {ev.HEADER_IDEMPOTENCY_KEY: f"key-{job_id}"}),
        (ev.TOPIC_KINEMATICS, events_pb2.KinematicsCompleted(header=h("kinematics", 1)), {}),
        (ev.TOPIC_PROJECTED, events_pb2.ProjectionCompleted(header=h("projection", 2)), {}),
        (ev.TOPIC_PROGRESS, events_pb2.SimulationProgress(
            header=h("generation", 3),
            progress=common_pb2.Progress(stage="generation", step=1, total=2)), {}),
    ]
    if outcome == "completed":
        result = simulator_pb2.SimulationResult(rgb_video_uri=f"file:///{job_id}.mp4")
        out.append((ev.TOPIC_COMPLETED, events_pb2.SimulationCompleted(header=h("generation", 4),
                                                                       result=result), {}))
    else:
        out.append((ev.TOPIC_FAILED, events_pb2.SimulationFailed(
            header=h("generation", 4),
            error=common_pb2.ErrorInfo(code=outcome, message="boom", stage="generation")), {}))
    return [(t, m.SerializeToString(), hd) for t, m, hd in out]


def test_lifecycle_moves_forward_and_records_result():
    table = JobTable()
    seen = []
    for topic, payload, headers in _events("j1", 1000.0):
        table.apply(topic, payload, headers)
        seen.append(table.get("j1").state)
    assert seen == [S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING, S.JOB_STATE_RUNNING,
                    S.JOB_STATE_RUNNING, S.JOB_STATE_SUCCEEDED]
    job = table.get("j1")
    assert job.result.rgb_video_uri == "file:///j1.mp4"
    assert job.created_at.seconds == 1000 and job.updated_at.seconds == 1004


def test_duplicate_completion_counted_once_and_terminal_is_sticky():
    table = JobTable()
    events = _events("j1", 1000.0)
    for topic, payload, headers in events:
        table.apply(topic, payload, headers)
    completed = events[-1]
    assert table.apply(*completed) is False  # redelivered completion changes nothing
    late_failure = events_pb2.SimulationFailed(
        header=ev.header("j1", "generation", now_s=2000.0),
        error=common_pb2.ErrorInfo(code="INTERNAL", message="late"))
    table.apply(ev.TOPIC_FAILED, late_failure.SerializeToString())
    job = table.get("j1")
    assert job.state == S.JOB_STATE_SUCCEEDED and not job.HasField("error")
    assert table.counts("j1") == (2, 3)


def test_replay_in_any_order_rebuilds_the_same_table():
    events = []
    for i in range(12):
        events += _events(f"j{i}", 1000.0 + i, outcome=["completed", "INTERNAL", "CANCELLED"][i % 3])
    reference = JobTable()
    for e in events:
        reference.apply(*e)
    shuffled = list(events) * 2  # every event delivered twice, in a random order
    random.Random(7).shuffle(shuffled)
    replayed = JobTable()
    for e in shuffled:
        replayed.apply(*e)
    for i in range(12):
        assert replayed.get(f"j{i}") == reference.get(f"j{i}")
    assert reference.get("j1").state == S.JOB_STATE_FAILED
    cancelled = reference.get("j2")
    assert cancelled.state == S.JOB_STATE_CANCELLED and cancelled.cancel_requested


def test_progress_never_moves_backwards():
    table = JobTable()
    table.apply(ev.TOPIC_PROJECTED, events_pb2.ProjectionCompleted(
        header=ev.header("j", "projection", now_s=10)))
    table.apply(ev.TOPIC_KINEMATICS, events_pb2.KinematicsCompleted(
        header=ev.header("j", "kinematics", now_s=9)))
    assert table.get("j").progress.stage == "projection"
    for step in (3, 1):
        table.apply(ev.TOPIC_PROGRESS, events_pb2.SimulationProgress(
            header=ev.header("j", "generation", now_s=11),
            progress=common_pb2.Progress(stage="generation", step=step, total=5)))
    assert table.get("j").progress.step == 3


def test_list_pages_newest_first_and_filters_by_state():
    table = JobTable()
    for i in range(7):
        for e in _events(f"j{i}", 1000.0 + i, outcome="completed" if i % 2 else "INTERNAL"):
            table.apply(*e)
    page, token = table.list(page_size=3)
    ids = [j.job_id for j in page]
    while token:
        page, token = table.list(page_size=3, page_token=token)
        ids += [j.job_id for j in page]
    assert ids == [f"j{i}" for i in range(6, -1, -1)]
    failed, token = table.list(state=S.JOB_STATE_FAILED)
    assert [j.job_id for j in failed] == ["j6", "j4", "j2", "j0"] and token == ""
    with pytest.raises(InvalidArgument):
        table.list(page_token="not-a-token!")
    with pytest.raises(InvalidArgument):
        table.list(page_size=501)
    with pytest.raises(InvalidArgument):  # was an IndexError
        table.list(page_size=-1)


def test_wait_for_change_wakes_watchers_and_unknown_jobs_are_not_found():
    table = JobTable()
    events = _events("j", 1000.0)
    table.apply(*events[0])
    version = table.version("j")
    threading.Timer(0.05, lambda: table.apply(*events[1])).start()
    job, new_version = table.wait_for_change("j", version, timeout_s=5)
    assert new_version > version and job.state == S.JOB_STATE_RUNNING
    with pytest.raises(NotFound):
        table.get("nope")
    with pytest.raises(InvalidArgument):
        table.apply(ev.TOPIC_REQUESTED, events_pb2.SimulationRequested())


def test_cancel_request_recorded_until_terminal():
    table = JobTable()
    table.apply(*_events("j", 1000.0)[0])
    assert table.mark_cancel_requested("j").cancel_requested
    with pytest.raises(NotFound):
        table.mark_cancel_requested("other")


def test_ignored_duplicate_terminal_event_does_not_move_updated_at():
    table = JobTable()
    for e in _events("j", 1000.0, outcome="INTERNAL"):
        table.apply(*e)
    before = table.get("j")
    late = events_pb2.SimulationFailed(header=ev.header("j", "projection", now_s=5000.0),
                                       error=common_pb2.ErrorInfo(code="INTERNAL", message="dup"))
    assert table.apply(ev.TOPIC_FAILED, late) is False
    assert table.get("j") == before


def test_prometheus_view_of_the_table():
    from k4d_simulator.metrics import JobTableCollector
    from prometheus_client import CollectorRegistry, generate_latest

    table = JobTable()
    for e in _events("a", 1000.0) + _events("b", 1001.0, outcome="INTERNAL"):
        table.apply(*e)
    table.apply(*_events("a", 1000.0)[-1])  # a redelivered completion
    registry = CollectorRegistry()
    registry.register(JobTableCollector(table))
    text = generate_latest(registry).decode()
    assert 'k4d_simulator_jobs{state="succeeded"} 1.0' in text
    assert 'k4d_simulator_jobs{state="failed"} 1.0' in text
    assert 'k4d_simulator_jobs{state="queued"} 0.0' in text
    assert "k4d_simulator_ignored_terminal_events_total 1.0" in text


def _outcome_events(job_id: str, failed_frames: int, static_world: bool):
    h = lambda stage, dt: ev.header(job_id, stage, now_s=2000.0 + dt)  # noqa: E731
    model = {"name": "static-world"} if static_world else {"name": "tiny", "version": "1"}
    result = simulator_pb2.SimulationResult(
        stage_seconds={"kinematics": 0.5, "projection": 1.0, "generation": 2.0},
        model=generator_pb2.ModelInfo(**model))
    return [
        (ev.TOPIC_REQUESTED, events_pb2.SimulationRequested(
            header=h("submit", 0), spec=simulator_pb2.SimulationSpec(num_frames=9))),
        (ev.TOPIC_KINEMATICS, events_pb2.KinematicsCompleted(
            header=h("kinematics", 1), failed_frames=failed_frames, seconds=0.5,
            spec=simulator_pb2.SimulationSpec(num_frames=9))),
        (ev.TOPIC_PROJECTED, events_pb2.ProjectionCompleted(header=h("projection", 2))),
        (ev.TOPIC_COMPLETED, events_pb2.SimulationCompleted(header=h("generation", 3),
                                                            result=result)),
    ]


@pytest.mark.parametrize("order", ["pipeline", "completion first"])
def test_ik_failures_and_stage_outcomes_reach_the_result(order):
    """KinematicsCompleted.failed_frames was dropped after the kinematics stage: the user
    saw no trace of IK failures in cluster mode."""
    events = _outcome_events("ik", failed_frames=3, static_world=True)
    if order != "pipeline":
        events = [events[0], events[3], events[2], events[1]]
    table = JobTable()
    for topic, event in events:
        table.apply(topic, event.SerializeToString())
    stages = table.get("ik").result.stages
    assert [s.stage for s in stages] == ["kinematics", "projection", "generation"]
    assert [s.seconds for s in stages] == [0.5, 1.0, 2.0]
    assert stages[0].failed_frames == 3
    assert list(stages[0].warnings) == [
        "IK missed its tolerances on 3 of 9 frames; those frames show the closest pose it found"]
    assert not stages[1].warnings and "static-world" in stages[2].warnings[0]
    clean = JobTable()
    for topic, event in _outcome_events("ok", failed_frames=0, static_world=False):
        clean.apply(topic, event)
    assert all(not s.warnings and not s.failed_frames for s in clean.get("ok").result.stages)


def test_restored_final_record_is_kept_and_finished_jobs_are_taken_once():
    table = JobTable()
    for topic, event in _outcome_events("f", failed_frames=1, static_world=False):
        table.apply(topic, event)
    finished = table.take_finished()
    assert [j.job_id for j in finished] == ["f"] and table.take_finished() == []
    final = finished[0]

    fresh = JobTable()
    assert fresh.restore(final) and not fresh.restore(final)
    assert fresh.get("f") == final
    for topic, event in _outcome_events("f", failed_frames=0, static_world=True):
        fresh.apply(topic, event)  # a replay of older events changes nothing
    assert fresh.get("f") == final and fresh.take_finished() == []
    with pytest.raises(InvalidArgument):
        fresh.restore(simulator_pb2.Job(job_id="q", state=S.JOB_STATE_QUEUED))
