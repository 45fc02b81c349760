"""Sampling options (issue 44): the model's defaults under the request's, the profiles, the
older num_steps/scheduler spellings, FP8 refused on CPU (CLI exit 2, gRPC INVALID_ARGUMENT)
before any work, levers refused by a backend without them."""

from __future__ import annotations

import pytest
from k4d.cli.main import main
from k4d.errors import InvalidArgument
from k4d_generator.pipeline import Kinema4DPipeline
from k4d_model.pipeline import Kinema4DPipeline as CorePipeline
from k4d_model.testing import CallableDenoiser


def _call(pipe, make_robot, **kwargs):
    image, robot = make_robot()
    return pipe(image, **robot, **kwargs)


def test_model_defaults_request_overrides_and_profiles(make_tiny, make_robot):
    components, _ = make_tiny("act")
    components.info.sampling = {"solver": "euler", "steps": 2}
    pipe = Kinema4DPipeline.from_components(components)
    meta = _call(pipe, make_robot).metadata
    assert (meta["num_steps"], meta["scheduler"]) == (2, "FlowMatchEulerDiscreteScheduler")
    assert meta["options"]["solver"] == "euler" and meta["cached_steps"] == 0
    meta = _call(pipe, make_robot, options={"profile": "reference", "steps": 3}).metadata
    assert (meta["num_steps"], meta["options"]["profile"]) == (3, "reference")
    meta = _call(pipe, make_robot, options={"solver": "unipc"}, num_steps=1).metadata
    assert (meta["num_steps"], meta["scheduler"]) == (1, "UniPCMultistepScheduler")
    assert meta["attention_backend"] in ("flash (cpu)", "math")
    with pytest.raises(InvalidArgument) as err:
        _call(pipe, make_robot, options={"steps": 3}, num_steps=4)
    assert err.value.violations[0].field == "sampling.steps"


def test_fp8_refused_on_cpu_before_any_work(make_tiny, make_robot):
    pipe = Kinema4DPipeline.from_components(make_tiny("act")[0])
    calls = []
    pipe.encode_image = lambda *a: calls.append(a)
    with pytest.raises(InvalidArgument) as err:
        _call(pipe, make_robot, options={"quant": "fp8"}, num_steps=1)
    assert err.value.violations[0].field == "sampling.quant"
    assert "Hopper" in str(err.value) and "cpu" in str(err.value) and not calls
    with pytest.raises(InvalidArgument):  # the model's own default is refused the same way
        _call(pipe, make_robot, options={"profile": "reference", "quant": "fp8"})


def test_a_backend_without_levers_refuses_them(make_tiny, make_robot):
    components, _ = make_tiny("act")
    pipe = CorePipeline(components, CallableDenoiser(components.transformer))
    for options, field in (({"cache": "dbcache"}, "sampling.cache"),
                           ({"compile": True}, "sampling.compile")):
        with pytest.raises(InvalidArgument) as err:
            _call(pipe, make_robot, options=options, num_steps=1)
        assert err.value.violations[0].field == field


def test_simulate_flags_refused_with_one_line(capsys):
    assert main(["simulate", "--robot", "panda", "--actions", "a.json", "--image", "x.png",
                 "--camera", "c.json", "--out", "/tmp/never", "--cache", "teacache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cache" in err[0]


def test_the_process_profile_is_under_every_request(tmp_path, make_tiny, make_robot):
    from k4d.config import Config
    from k4d.store import LocalStore
    from k4d_generator.server import GeneratorService

    service = GeneratorService(Config(), store=LocalStore(tmp_path),
                               env={"K4D_GENERATOR_PROFILE": "reference"})
    manager = service.manager
    assert manager.default_sampling == {"profile": "reference"}
    with pytest.raises(InvalidArgument):
        GeneratorService(Config(), store=LocalStore(tmp_path),
                         env={"K4D_GENERATOR_PROFILE": "turbo"})
    manager.warm_up = False
    manager._loaded = type("Loaded", (), {"pipeline": Kinema4DPipeline.from_components(
        make_tiny("act")[0]), "backend": "torch"})()
    image, robot = make_robot()
    meta = manager.generate(image, **robot, options={"steps": 1}).metadata
    assert meta["options"]["profile"] == "reference" and meta["scheduler"].startswith("FlowMatch")
    assert meta["num_steps"] == 1  # the request's steps over the profile's 50
