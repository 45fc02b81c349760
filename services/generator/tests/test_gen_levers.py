"""The torch backend's levers (issue 44): cache-dit step caching attached through its block
adapter (cached steps reported; a fresh context per generation, so nothing leaks between
requests; `cache: none` detaches it), compiled blocks (compile time apart from the steady
state), and the attention kernel recorded."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_generator.pipeline import Kinema4DPipeline

pytest.importorskip("cache_dit")

CACHED = {"solver": "unipc", "steps": 6, "cache": "dbcache", "cache_threshold": 0.5}


def _run(pipe, make_robot, seed=0, **options):
    image, robot = make_robot(seed=seed)
    return pipe(image, **robot, seed=seed, options=options)


def test_cache_dit_caches_steps_fresh_per_generation(make_tiny, make_robot):
    pipe = Kinema4DPipeline.from_components(make_tiny("act")[0])
    plain = _run(pipe, make_robot, **{**CACHED, "cache": "none"})
    first = _run(pipe, make_robot, **CACHED)
    assert first.metadata["cached_steps"] > 0 and plain.metadata["cached_steps"] == 0
    assert first.metadata["options"]["cache"] == "dbcache"
    assert not np.array_equal(first.pointmap, plain.pointmap)  # the cache did something
    other = _run(pipe, make_robot, seed=1, **CACHED)  # another request in between
    assert other.metadata["cached_steps"] > 0
    again = _run(pipe, make_robot, **CACHED)
    np.testing.assert_array_equal(again.rgb, first.rgb)  # nothing of `other` leaked
    np.testing.assert_array_equal(again.pointmap, first.pointmap)
    assert again.metadata["cached_steps"] == first.metadata["cached_steps"]
    detached = _run(pipe, make_robot, **{**CACHED, "cache": "none"})
    np.testing.assert_array_equal(detached.pointmap, plain.pointmap)


def test_taylorseer_calibrator(make_tiny, make_robot):
    pipe = Kinema4DPipeline.from_components(make_tiny("act")[0])
    result = _run(pipe, make_robot, **{**CACHED, "cache": "dbcache-taylorseer"})
    assert result.metadata["cached_steps"] > 0
    assert np.isfinite(result.pointmap).all()


@pytest.mark.slow  # inductor builds C++ kernels: ~2 min on a busy 2-core machine
def test_compiled_blocks_report_compile_time_apart(make_tiny, make_robot):
    pipe = Kinema4DPipeline.from_components(make_tiny("act")[0])
    eager = _run(pipe, make_robot, steps=2)
    assert eager.metadata["attention_backend"] in ("flash (cpu)", "math")
    assert "compile" not in eager.metadata["timings_s"]
    compiled = _run(pipe, make_robot, steps=2, compile=True)
    timings = compiled.metadata["timings_s"]
    assert timings["compile"] > 0 and timings["denoising_step"] > 0
    np.testing.assert_allclose(compiled.pointmap, eager.pointmap, atol=1e-3)
    steady = _run(pipe, make_robot, steps=2, compile=True)  # compiled once, not again
    assert "compile" not in steady.metadata["timings_s"]
