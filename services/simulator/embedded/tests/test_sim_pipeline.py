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
