"""Stage outcomes in cluster mode: the kinematics worker's IK failures, every stage's time
and the warnings reach the SimulationResult a user gets from the front door, equal to
what the embedded runner reports for the same spec (issue 9 point 4: failed_frames used to
be dropped after the kinematics stage)."""

from __future__ import annotations

from pathlib import Path

import pytest
from k4d_embedded.pipeline import StageCores, run_embedded
from k4d_embedded.testing.localcluster import example_spec, unreachable_example, wait_terminal
from kinema4d.v1 import simulator_pb2, simulator_pb2_grpc

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "panda_pick"
S = simulator_pb2.JobState


def _without_times(outcomes):
    return [(o.stage, o.failed_frames, list(o.warnings)) for o in outcomes]


def test_ik_failures_reach_the_cluster_result_as_in_embedded_mode(cluster, tmp_path):
    spec = example_spec(unreachable_example(tmp_path / "unreachable", EXAMPLE), None)
    embedded = run_embedded(spec, None, cores=StageCores()).outcomes()
    assert embedded[0].failed_frames >= 1

    channel = cluster.channel()
    try:
        stub = simulator_pb2_grpc.SimulatorServiceStub(channel)
        job_id = stub.Submit(simulator_pb2.SubmitRequest(spec=spec)).job_id
        job = wait_terminal(stub, [job_id], 180)[job_id]
    finally:
        channel.close()
    assert job.state == S.JOB_STATE_SUCCEEDED, (job.error, cluster.logs())
    stages = job.result.stages
    assert _without_times(stages) == _without_times(embedded)
    assert all(o.seconds > 0 for o in stages)
