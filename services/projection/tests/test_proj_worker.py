"""Projection stage worker on the in-process bus: KinematicsCompleted -> stored robot
condition -> ProjectionCompleted; idempotent redelivery, cancelled jobs, bad input."""

import threading

import numpy as np
from k4d.bus import InProcessBus, event_headers
from k4d.bus.topics import SIM_FAILED, SIM_KINEMATICS, SIM_PROJECTED, dlq
from k4d.camera import Camera
from k4d.camera_proto import camera_to_proto
from k4d.config import Config
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.store import LocalStore, get_array, put_array
from k4d.tensor_io import TensorRef
from k4d.testing.bus import drain
from k4d_projection.renderer import RobotRenderer
from k4d_projection.worker import build_worker
from kinema4d.v1 import common_pb2, events_pb2, simulator_pb2

CAMERA = Camera.look_at([1.3, 0.8, 0.9], [0.0, 0.0, 0.4], width=48, height=32, fovy_deg=60)


def _event(store, job_id, poses, camera=CAMERA):
    ref = put_array(store, f"jobs/{job_id}/kinematics/poses", poses)
    spec = simulator_pb2.SimulationSpec(robot=common_pb2.RobotRef(name="panda"),
                                        camera=camera_to_proto(camera), num_frames=len(poses))
    return events_pb2.KinematicsCompleted(header=events_pb2.EventHeader(job_id=job_id),
                                          spec=spec, poses=ref.to_proto(), seconds=0.25,
                                          link_names=load_robot("panda").link_names)


def _drain(bus, topic, count, timeout=30.0):
    return drain(bus, topic, count, timeout_s=timeout)


def test_stage_stores_outputs_and_emits_projection_completed(tmp_path):
    bus, store = InProcessBus(), LocalStore(tmp_path / "store")
    model = load_robot("panda")
    joints = np.tile((model.lower + model.upper) / 2, (3, 1))
    joints[:, 0] = [-0.3, 0.0, 0.3]
    poses = forward_kinematics(model, joints)
    bus.ensure_topics([SIM_KINEMATICS, SIM_PROJECTED, SIM_FAILED, dlq(SIM_KINEMATICS)])
    good = _event(store, "job-1", poses).SerializeToString()
    bus.publish(SIM_KINEMATICS, "job-1", good, event_headers("job-1"))
    bus.publish(SIM_KINEMATICS, "job-1", good, event_headers("job-1", attempt=2))  # redelivery
    bad_camera = Camera.from_fovy(60, 48, 32)
    bad = _event(store, "job-2", poses[:, :5], bad_camera)  # wrong link count
    bus.publish(SIM_KINEMATICS, "job-2", bad.SerializeToString(), event_headers("job-2"))
    store.put_bytes("jobs/job-3/cancel", b"cancel")
    bus.publish(SIM_KINEMATICS, "job-3", _event(store, "job-3", poses).SerializeToString(),
                event_headers("job-3"))
    bus.publish(SIM_KINEMATICS, "job-4", b"\xff\xff not a protobuf", event_headers("job-4"))

    worker = build_worker(Config(worker_backoff_s=0.01), bus, store)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        projected = _drain(bus, SIM_PROJECTED, 2)
        failed = _drain(bus, SIM_FAILED, 1)
        dead = _drain(bus, dlq(SIM_KINEMATICS), 2)
    finally:
        stop.set()
        thread.join(10)

    assert len(projected) == 2 and {m.job_id for m in projected} == {"job-1"}
    first, second = (events_pb2.ProjectionCompleted.FromString(m.value) for m in projected)
    assert first.depth.sha256 == second.depth.sha256  # idempotent: same bytes rewritten
    assert first.depth.uri.endswith("jobs/job-1/projection/depth")
    assert first.stage_seconds["kinematics"] == 0.25 and first.stage_seconds["projection"] > 0
    expected = RobotRenderer.from_robot(model).render(poses, CAMERA)
    for name in ("depth", "pointmap", "mask", "link_id", "rgb"):
        stored = get_array(store, TensorRef.from_proto(getattr(first, name)))
        np.testing.assert_array_equal(stored, getattr(expected, name))
    assert expected.mask.sum() > 100
    assert [m.job_id for m in failed] == ["job-3"]
    assert events_pb2.SimulationFailed.FromString(failed[0].value).error.code == "CANCELLED"
    assert sorted(m.job_id for m in dead) == ["job-2", "job-4"]
