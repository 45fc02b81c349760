"""Kinematics stage worker on the in-process bus: requested -> stored outputs ->
KinematicsCompleted; cancelled jobs and bad input handled."""

import threading

import numpy as np
from k4d.bus import InProcessBus, event_headers
from k4d.bus.topics import SIM_FAILED, SIM_KINEMATICS, SIM_REQUESTED, dlq
from k4d.config import Config
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.store import LocalStore, get_array
from k4d.tensor_io import TensorRef, to_tensor
from k4d.testing.bus import drain
from k4d_kinematics.worker import build_worker
from kinema4d.v1 import common_pb2, events_pb2, kinematics_pb2, simulator_pb2


def _request(job_id, steps, kind=kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS):
    spec = simulator_pb2.SimulationSpec(
        robot=common_pb2.RobotRef(name="panda"), num_frames=5,
        actions=kinematics_pb2.ActionSequence(
            type=kind, values=common_pb2.TensorData(inline=to_tensor(np.asarray(steps, float)))))
    return events_pb2.SimulationRequested(header=events_pb2.EventHeader(job_id=job_id), spec=spec)


def _drain(bus, topic, count, timeout=20.0):
    return drain(bus, topic, count, timeout_s=timeout)


def test_stage_stores_outputs_and_emits_completion(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    panda = load_robot("panda")
    steps = [panda.mid_configuration[:7].tolist(), (panda.mid_configuration[:7] + 0.1).tolist()]
    bus.ensure_topics([SIM_REQUESTED, SIM_KINEMATICS, SIM_FAILED, dlq(SIM_REQUESTED)])
    bus.publish(SIM_REQUESTED, "job-1", _request("job-1", steps).SerializeToString(),
                event_headers("job-1"))
    bus.publish(SIM_REQUESTED, "job-2", _request("job-2", [[0.0] * 3]).SerializeToString(),
                event_headers("job-2"))  # wrong joint count: permanent error
    store.put_bytes("jobs/job-3/cancel", b"cancel")
    bus.publish(SIM_REQUESTED, "job-3", _request("job-3", steps).SerializeToString(),
                event_headers("job-3"))
    bus.publish(SIM_REQUESTED, "job-4", b"\xff\xff not a protobuf", event_headers("job-4"))

    worker = build_worker(Config(worker_backoff_s=0.01), bus, store)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        completed = _drain(bus, SIM_KINEMATICS, 1)
        failed = _drain(bus, SIM_FAILED, 1)
        dead = _drain(bus, dlq(SIM_REQUESTED), 2)
    finally:
        stop.set()
        thread.join(10)

    assert len(completed) == 1
    event = events_pb2.KinematicsCompleted.FromString(completed[0].value)
    assert event.header.job_id == "job-1" and event.header.stage == "kinematics"
    assert event.failed_frames == 0 and list(event.link_names) == panda.link_names
    joints = get_array(store, TensorRef.from_proto(event.joints))
    poses = get_array(store, TensorRef.from_proto(event.poses))
    assert joints.shape == (5, 8) and poses.shape == (5, 13, 4, 4)
    np.testing.assert_allclose(poses, forward_kinematics(panda, joints))
    assert store.exists("jobs/job-1/kinematics/joints")

    cancelled = events_pb2.SimulationFailed.FromString(failed[0].value)
    assert cancelled.header.job_id == "job-3" and cancelled.error.code == "CANCELLED"
    assert sorted(m.job_id for m in dead) == ["job-2", "job-4"]
    assert all(m.header("k4d-error-type") == "InvalidArgument" for m in dead)


def test_robot_ref_outside_the_store_names_the_field(tmp_path):
    import pytest
    from k4d.errors import InvalidArgument
    from k4d.robots.proto import robot_from_ref
    from k4d.robots.registry import RobotRegistry

    registry = RobotRegistry(LocalStore(tmp_path / "store"), cache_dir=tmp_path / "cache")
    assert robot_from_ref(common_pb2.RobotRef(name="panda"), registry).name == "panda"
    for uri in ("s3://elsewhere/robots/x/bundle", "file:///etc/passwd", "http://[bad"):
        with pytest.raises(InvalidArgument) as error:
            robot_from_ref(common_pb2.RobotRef(bundle_uri=uri), registry, field="spec.robot")
        assert error.value.violations[0].field == "spec.robot.bundle_uri"
    with pytest.raises(InvalidArgument, match="set name or bundle_uri"):
        robot_from_ref(common_pb2.RobotRef(), registry, field="spec.robot")
