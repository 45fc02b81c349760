"""run_embedded: stage order, progress, timings, cancellation between stages."""

from pathlib import Path

import pytest
from k4d.errors import Cancelled, InvalidArgument
from k4d_embedded.pipeline import StageCores, run_embedded
from k4d_embedded.testing.localcluster import example_spec

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "panda_pick"


@pytest.fixture(scope="module")
def cores():
    return StageCores()


def test_stages_run_in_order_with_progress_and_timings(cores):
    spec = example_spec(EXAMPLE, None, frames=4, downscale=12)
    seen = []
    result = run_embedded(spec, None, lambda p: seen.append((p.stage, p.message)), cores=cores)
    stages = [stage for stage, message in seen if message == "started"]
    assert stages == ["kinematics", "projection", "generation"]
    assert set(result.stage_seconds) == set(stages)
    assert result.generation.static_world and result.generation.rgb.shape == (4, 40, 60, 3)
    assert result.kinematics.joints.shape == (4, 8)


def test_cancellation_is_honoured_between_stages(cores):
    spec = example_spec(EXAMPLE, None, frames=4, downscale=12)
    seen = []
    with pytest.raises(Cancelled, match="before the projection stage"):
        run_embedded(spec, None, lambda p: seen.append(p.stage), cores=cores,
                     cancelled=lambda: "kinematics" in seen)
    assert "projection" not in seen


def test_invalid_spec_is_rejected_before_any_stage(cores):
    spec = example_spec(EXAMPLE, None, frames=4, downscale=12)
    spec.camera.intrinsics.width += 1
    with pytest.raises(InvalidArgument) as exc:
        run_embedded(spec, None, cores=cores)
    assert exc.value.violations[0].field == "spec.initial_image"


def test_unknown_model_fails_before_any_stage(cores):
    from k4d.errors import K4DError

    spec = example_spec(EXAMPLE, None, frames=4, downscale=12)
    spec.model.name = "no-such-model"
    seen = []
    with pytest.raises(K4DError, match="no-such-model"):
        run_embedded(spec, None, lambda p: seen.append(p.stage), cores=cores)
    assert seen == []


def _inputs(**kw):
    from k4d_embedded.inputs import SimulationInputs

    return SimulationInputs(robot="panda", actions=EXAMPLE / "actions.json",
                            image=EXAMPLE / "scene.png", camera=EXAMPLE / "camera.json",
                            frames=4, downscale=12, **kw)


def test_the_scene_travels_beside_the_spec_and_gives_the_same_rollout(cores):
    """`k4d simulate` hands the runner the image it read as an array (no inline copy in
    the spec to decode again); the rollout equals the one of the whole spec."""
    import numpy as np
    from k4d_embedded.inputs import build_spec, load_simulation

    spec, scene = load_simulation(_inputs())
    assert not spec.HasField("initial_image") and scene.image.flags.writeable
    beside = run_embedded(spec, None, cores=cores, scene=scene)
    inline = run_embedded(build_spec(_inputs()), None, cores=cores)
    assert np.array_equal(beside.image, inline.image)
    assert np.array_equal(beside.generation.rgb, inline.generation.rgb)
    assert np.array_equal(beside.projection.mask, inline.projection.mask)


def test_a_scene_beside_the_spec_is_checked_against_the_camera(cores):
    from k4d_embedded.inputs import load_simulation

    spec, scene = load_simulation(_inputs())
    spec.camera.intrinsics.width += 1
    with pytest.raises(InvalidArgument) as exc:
        run_embedded(spec, None, cores=cores, scene=scene)
    assert [v.field for v in exc.value.violations] == ["spec.initial_image"]


def test_the_embedded_kinematics_has_the_workers_ik_budget(cores, monkeypatch):
    """Both modes call k4d_kinematics.core: above 60 frames the per-frame IK budget
    shrinks (30 s per job) in the embedded runner as in the worker."""
    import k4d_kinematics.core as kinematics_core
    from k4d_embedded.pipeline import run_kinematics

    seen = []
    solve = kinematics_core.solve_actions

    def spy(model, actions, options=None):
        seen.append(options)
        return solve(model, actions, options)

    monkeypatch.setattr(kinematics_core, "solve_actions", spy)
    spec = example_spec(EXAMPLE, None, frames=120, downscale=12)
    out = run_kinematics(spec, cores)
    assert out.joints.shape[0] == 120
    assert seen[0].timeout_s == pytest.approx(0.25)
    assert seen[0] == kinematics_core.job_ik_options(120)


def test_sampling_options_travel_in_the_spec():
    """`k4d simulate` / `k4d submit` flags (and a caller's `sampling` layer, its steps too)
    become the spec's SamplingParams fields (issue 44)."""
    from k4d_embedded.inputs import build_spec

    spec = build_spec(_inputs(sampling={"profile": "fast", "solver": "unipc", "steps": 12,
                                        "cache": "dbcache", "cache_threshold": 0.1,
                                        "quant": "none", "compile": False}))
    s = spec.sampling
    assert (s.profile, s.solver, s.steps, s.cache, s.quant) == ("fast", "unipc", 12, "dbcache",
                                                                "none")
    assert s.cache_threshold == pytest.approx(0.1) and s.HasField("compile") and not s.compile
    assert build_spec(_inputs(steps=7)).sampling.steps == 7
    assert not build_spec(_inputs()).sampling.HasField("compile")
