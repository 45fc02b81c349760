"""The kinematics stage against real servers: a Kafka-protocol broker and an S3 server."""

import threading
import time
import uuid

import numpy as np
import pytest
from k4d.bus import event_headers
from k4d.bus.topics import SIM_KINEMATICS, SIM_REQUESTED
from k4d.config import Config
from k4d.robots.descriptions import load_robot
from k4d.store import get_array
from k4d.tensor_io import TensorRef, to_tensor
from k4d_kinematics.worker import build_worker
from kinema4d.v1 import common_pb2, events_pb2, kinematics_pb2, simulator_pb2

pytestmark = pytest.mark.integration


def test_stage_on_kafka_and_s3(kafka_bus, s3_store):
    panda = load_robot("panda")
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    steps = np.stack([panda.mid_configuration[:7], panda.mid_configuration[:7] + 0.2])
    spec = simulator_pb2.SimulationSpec(
        robot=common_pb2.RobotRef(name="panda"), num_frames=7,
        actions=kinematics_pb2.ActionSequence(
            type=kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS,
            values=common_pb2.TensorData(inline=to_tensor(steps))))
    request = events_pb2.SimulationRequested(header=events_pb2.EventHeader(job_id=job_id), spec=spec)
    kafka_bus.ensure_topics([SIM_REQUESTED, SIM_KINEMATICS])
    kafka_bus.publish(SIM_REQUESTED, job_id, request.SerializeToString(), event_headers(job_id))

    worker = build_worker(Config(worker_backoff_s=0.05), kafka_bus, s3_store)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    consumer = kafka_bus.consumer([SIM_KINEMATICS], f"test-{uuid.uuid4().hex[:6]}")
    events, deadline = [], time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            events += [m for m in consumer.poll(0.5, max_records=10) if m.job_id == job_id]
            if events:
                break
    finally:
        consumer.close()
        stop.set()
        thread.join(15)
    assert events, "no KinematicsCompleted within 60 s"
    event = events_pb2.KinematicsCompleted.FromString(events[0].value)
    joints = get_array(s3_store, TensorRef.from_proto(event.joints))
    np.testing.assert_allclose(joints[[0, -1], :7], steps)
    assert get_array(s3_store, TensorRef.from_proto(event.poses)).shape == (7, 13, 4, 4)
