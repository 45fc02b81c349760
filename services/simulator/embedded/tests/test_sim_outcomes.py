"""Stage outcomes in embedded mode: IK failures, per-stage seconds and warnings reach the
result (`EmbeddedResult.outcomes`, summary.json `stages`/`warnings`), built by the same
function as the cluster's SimulationResult.stages (tests/e2e/test_e2e_stage_outcomes.py
runs the same spec through the stage workers and compares)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k4d_embedded.embedded import build_summary
from k4d_embedded.inputs import SimulationInputs
from k4d_embedded.pipeline import StageCores, run_embedded
from k4d_embedded.testing.localcluster import TINY_CLIP, example_spec, unreachable_example

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "panda_pick"


@pytest.fixture(scope="module")
def unreachable_run(tmp_path_factory):
    example = unreachable_example(tmp_path_factory.mktemp("unreachable"), EXAMPLE)
    spec = example_spec(example, None)
    return example, spec, run_embedded(spec, None, cores=StageCores())


def test_ik_failures_and_every_stage_reach_the_embedded_result(unreachable_run):
    _, _, result = unreachable_run
    outcomes = result.outcomes()
    assert [o.stage for o in outcomes] == ["kinematics", "projection", "generation"]
    kinematics = outcomes[0]
    assert kinematics.failed_frames == result.kinematics.failed_frames >= 1
    assert kinematics.warnings[0].startswith(
        f"IK missed its tolerances on {kinematics.failed_frames} of {TINY_CLIP['frames']} frames")
    assert all(o.seconds > 0 for o in outcomes)
    assert "static-world" in outcomes[2].warnings[0]


def test_summary_carries_the_stage_outcomes(unreachable_run):
    example, spec, result = unreachable_run
    inputs = SimulationInputs(robot="panda", actions=example / "actions.json",
                              image=example / "scene.png", camera=example / "camera.json")
    summary = build_summary(inputs, spec, result, 1.0)
    stages = summary["stages"]
    assert [s["stage"] for s in stages] == ["kinematics", "projection", "generation"]
    assert stages[0]["failed_frames"] == result.kinematics.failed_frames
    assert summary["warnings"][0].startswith("kinematics: IK missed its tolerances")
    json.dumps(summary)  # summary.json stays plain JSON


def test_k4d_jobs_shows_the_stage_outcomes(unreachable_run):
    from k4d_embedded.client import format_job
    from kinema4d.v1 import simulator_pb2

    _, _, result = unreachable_run
    job = simulator_pb2.Job(job_id="sim-1", state=simulator_pb2.JobState.JOB_STATE_SUCCEEDED)
    job.result.stages.extend(result.outcomes())
    assert format_job(job).splitlines() == ["sim-1  succeeded  (2 warnings)"]
    lines = format_job(job, details=True).splitlines()
    assert lines[1].split()[0] == "kinematics" and "failed frames" in lines[1]
    assert lines[2].startswith("    warning: IK missed its tolerances")
