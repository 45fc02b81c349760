"""Kafka stage k4d.sim.projected -> generation -> k4d.sim.completed on the in-process bus:
outputs at deterministic keys (a redelivery rewrites the same bytes), progress events,
cancellation, dead-lettering of bad events, and hot reload on k4d.model.published."""

from __future__ import annotations

import threading

import numpy as np
from k4d.bus import InProcessBus, event_headers
from k4d.bus.topics import (
    MODEL_PUBLISHED,
    SIM_COMPLETED,
    SIM_FAILED,
    SIM_PROGRESS,
    SIM_PROJECTED,
    dlq,
)
from k4d.config import Config
from k4d.store import LocalStore, get_array
from k4d.tensor_io import TensorRef, to_tensor
from k4d.testing.bus import drain
from k4d.testing.events import projection_event
from k4d_generator.service import ModelManager
from k4d_generator.worker import build_worker
from k4d_model import registry
from kinema4d.v1 import common_pb2, events_pb2, generator_pb2, simulator_pb2


def _event(store, job_id, make_robot, model=None, steps=2):
    image, _ = make_robot()
    spec = simulator_pb2.SimulationSpec(
        initial_image=common_pb2.TensorData(inline=to_tensor(image)),
        model=model or common_pb2.ModelRef(),
        sampling=generator_pb2.SamplingParams(num_steps=steps, seed=5), num_frames=5)
    return projection_event(store, job_id, make_robot, spec).SerializeToString()


def _drain(bus, topic, count, timeout=60.0):
    return drain(bus, topic, count, timeout_s=timeout)


def test_gen_worker_stage(tmp_path, tiny_model_dir, make_robot):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    registry.publish(store, tiny_model_dir, "tiny", "1")
    bus.ensure_topics([SIM_PROJECTED, SIM_COMPLETED, SIM_FAILED, SIM_PROGRESS,
                       MODEL_PUBLISHED, dlq(SIM_PROJECTED)])
    tiny = common_pb2.ModelRef(name="tiny")
    good = _event(store, "job-1", make_robot, tiny)
    bus.publish(SIM_PROJECTED, "job-1", good, event_headers("job-1"))
    bus.publish(SIM_PROJECTED, "job-1", good, event_headers("job-1", attempt=2))  # redelivery
    bus.publish(SIM_PROJECTED, "job-2", _event(store, "job-2", make_robot),
                event_headers("job-2"))  # no model: static-world
    store.put_bytes("jobs/job-3/cancel", b"cancel")
    bus.publish(SIM_PROJECTED, "job-3", _event(store, "job-3", make_robot, tiny),
                event_headers("job-3"))
    bus.publish(SIM_PROJECTED, "job-4", b"\xff\xff not a protobuf", event_headers("job-4"))

    manager = ModelManager(store, cache_dir=tmp_path / "cache")
    tools, generate = [], manager.generate

    def generate_and_record_the_tool(*args, **kwargs):
        tools.append(kwargs.get("tool"))
        return generate(*args, **kwargs)

    manager.generate = generate_and_record_the_tool
    worker = build_worker(Config(worker_backoff_s=0.01), bus, store, manager=manager)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        completed = _drain(bus, SIM_COMPLETED, 3)
        failed = _drain(bus, SIM_FAILED, 1)
        dead = _drain(bus, dlq(SIM_PROJECTED), 1)
        progress = _drain(bus, SIM_PROGRESS, 4)
        # hot reload: version 2 of the served model is published
        registry.publish(store, tiny_model_dir, "tiny", "2")
        announce = events_pb2.ModelPublished(model=generator_pb2.ModelInfo(name="tiny",
                                                                           version="2"))
        bus.publish(MODEL_PUBLISHED, "tiny", announce.SerializeToString(), event_headers())
        for _ in range(300):
            if manager.loaded.info.get("version") == "2":
                break
            stop.wait(0.1)
    finally:
        stop.set()
        thread.join(15)

    by_job = {}
    for message in completed:
        by_job.setdefault(message.job_id, []).append(
            events_pb2.SimulationCompleted.FromString(message.value).result)
    assert sorted(by_job) == ["job-1", "job-2"] and len(by_job["job-1"]) == 2
    first, second = by_job["job-1"]
    assert first.rgb.sha256 == second.rgb.sha256  # seeded: the redelivery rewrote the same bytes
    assert first.pointmap.uri.endswith("jobs/job-1/generation/pointmap")
    assert first.rgb_video_uri.endswith("jobs/job-1/generation/rgb.mp4")
    assert first.model.name == "tiny" and first.stage_seconds["projection"] == 0.5
    assert first.stage_seconds["generation"] > 0
    rgb = get_array(store, TensorRef.from_proto(first.rgb))
    assert rgb.shape == (5, 32, 48, 3) and rgb.dtype == np.uint8
    assert by_job["job-2"][0].model.variant == "static-world"
    assert [m.job_id for m in failed] == ["job-3"]
    assert events_pb2.SimulationFailed.FromString(failed[0].value).error.code == "CANCELLED"
    assert [m.job_id for m in dead] == ["job-4"]
    steps = [events_pb2.SimulationProgress.FromString(m.value).progress for m in progress]
    assert [(p.step, p.total) for p in steps[:2]] == [(1, 2), (2, 2)]
    assert manager.loaded.info["version"] == "2"  # hot-reloaded
    # the tool track read off the kinematics stage's joints and poses (what a tool condition reads)
    assert tools and all(tool.frames == 5 for tool in tools)
    assert np.allclose(tools[0].opening, np.linspace(0.04, 0.0, 5))


def test_gen_loaded_model_matches_its_ref_or_its_name_and_version():
    from k4d_generator.service import LoadedModel

    loaded = LoadedModel("registry:arm/2", "torch", "fp32", pipeline=None, load_seconds=0.0,
                         info={"name": "arm", "version": "2"})
    assert loaded.matches("arm", "2") and loaded.matches("arm")
    assert loaded.matches(uri="registry:arm/2")
    assert not loaded.matches("arm", "3") and not loaded.matches("other")
    assert not loaded.matches(uri="/models/arm")


def test_gen_published_version_switches_between_jobs(tmp_path, tiny_model_dir, make_robot):
    """A k4d.model.published announcement of a newer version swaps the model while a job
    samples: that job finishes on the old version, the next one runs on the new; replaying
    the older announcement changes nothing."""
    from k4d.model_events import announce_model_published
    from k4d_generator.worker import ModelReloader

    store, bus = LocalStore(tmp_path / "store"), InProcessBus()
    registry.publish(store, tiny_model_dir, "tiny", "1")
    manager = ModelManager(store, cache_dir=tmp_path / "cache", allow_static_world=False)
    manager.load("registry:tiny")
    image, robot = make_robot()
    sampling, release, results = threading.Event(), threading.Event(), {}

    def hold_at_first_step(done, total):
        if done == 1:
            sampling.set()
            release.wait(60)

    def in_flight():
        results["in_flight"] = manager.generate(image, **robot, num_steps=2,
                                                callback=hold_at_first_step)

    thread = threading.Thread(target=in_flight, daemon=True)
    thread.start()
    try:
        assert sampling.wait(60)
        consumer = bus.consumer([MODEL_PUBLISHED], "reload-test")
        registry.publish(store, tiny_model_dir, "tiny", "2", bus=bus)
        (announcement,) = consumer.poll(1.0, max_records=5)
        ModelReloader(manager).handle(announcement)
        assert manager.loaded.info["version"] == "2"
    finally:
        release.set()
        thread.join(60)
    assert results["in_flight"].metadata["model"]["version"] == "1"
    assert manager.generate(image, **robot, num_steps=1).metadata["model"]["version"] == "2"
    announce_model_published(bus, "tiny", "1", store.uri_for("models/tiny/1"))
    (replayed,) = consumer.poll(1.0, max_records=5)
    ModelReloader(manager).handle(replayed)
    assert manager.loaded.info["version"] == "2"


def test_gen_service_shares_one_manager_and_waits_for_its_startup_model(tmp_path):
    """`k4d serve generator --worker` builds one GeneratorService: the worker samples with
    the servicer's manager; a start-up model that cannot load stops the worker (the process
    exits for its supervisor to restart) before anything is consumed."""
    import pytest
    from k4d_generator.server import GeneratorService

    store, bus = LocalStore(tmp_path / "store"), InProcessBus()
    env = {"K4D_GENERATOR_MODEL": "registry:missing",
           "K4D_GENERATOR_CACHE_DIR": str(tmp_path / "cache")}
    service = GeneratorService(Config(worker_backoff_s=0.01), store=store, env=env)
    worker = service.build_worker(bus, store)
    assert worker.stage_worker.handler.handle.__self__.manager is service.manager
    assert worker.reload_worker.handler.__self__.manager is service.manager
    with pytest.raises(RuntimeError, match="registry:missing failed to load"):
        worker.run(threading.Event())
    assert service.manager.loaded is None


def test_gen_service_with_startup_model_serves_only_that_model(tmp_path, tiny_model_dir,
                                                               make_robot):
    """With K4D_GENERATOR_MODEL the process loads once, before consuming, and a job naming
    another model or precision is dead-lettered at once instead of loading a second copy."""
    from k4d_generator.server import GeneratorService
    from prometheus_client import REGISTRY

    def loads():
        return REGISTRY.get_sample_value("k4d_generator_model_loads_total",
                                         {"backend": "torch", "outcome": "ok"}) or 0.0

    store, bus = LocalStore(tmp_path / "store"), InProcessBus()
    registry.publish(store, tiny_model_dir, "tiny", "1")
    bus.ensure_topics([SIM_PROJECTED, SIM_COMPLETED, SIM_FAILED, SIM_PROGRESS,
                       MODEL_PUBLISHED, dlq(SIM_PROJECTED)])
    for job_id, model in (("job-other", common_pb2.ModelRef(name="other")),
                          ("job-tiny", common_pb2.ModelRef(name="tiny"))):
        bus.publish(SIM_PROJECTED, job_id, _event(store, job_id, make_robot, model),
                    event_headers(job_id))
    bf16 = events_pb2.ProjectionCompleted.FromString(
        _event(store, "job-bf16", make_robot, common_pb2.ModelRef(name="tiny")))
    bf16.spec.sampling.precision = "bf16"
    bus.publish(SIM_PROJECTED, "job-bf16", bf16.SerializeToString(), event_headers("job-bf16"))
    env = {"K4D_GENERATOR_MODEL": "registry:tiny",
           "K4D_GENERATOR_CACHE_DIR": str(tmp_path / "cache")}
    before = loads()
    service = GeneratorService(Config(worker_backoff_s=0.01), store=store, env=env)
    service.startup.start()
    worker = service.build_worker(bus, store)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        completed = _drain(bus, SIM_COMPLETED, 1)
        dead = _drain(bus, dlq(SIM_PROJECTED), 2)
    finally:
        stop.set()
        thread.join(15)
    assert [m.job_id for m in completed] == ["job-tiny"]
    assert sorted(m.job_id for m in dead) == ["job-bf16", "job-other"]
    errors = {m.job_id: m.header("k4d-error") for m in dead}
    assert "serves registry:tiny on torch fp32" in errors["job-other"]
    assert "asks for registry:other" in errors["job-other"]
    assert "asks for registry:tiny on bf16" in errors["job-bf16"]
    assert loads() - before == 1
