"""k4d.sampling (issue 44): profiles, layers, the request's fields and flags, bad values named."""

from __future__ import annotations

import argparse

import pytest
from k4d.errors import InvalidArgument
from k4d.sampling import (
    PROFILES,
    SamplingOptions,
    add_sampling_flags,
    resolve_sampling,
    sampling_layer_from_flags,
    sampling_layer_from_proto,
)
from kinema4d.v1 import generator_pb2


def test_profiles_and_flags_beside_them():
    assert resolve_sampling() == SamplingOptions()
    ref = resolve_sampling({"profile": "reference"})
    assert (ref.solver, ref.steps, ref.cache, ref.quant, ref.compile) == ("euler", 50, "none",
                                                                          "none", False)
    fast = resolve_sampling({"profile": "fast", "steps": 12})
    assert fast.steps == 12 and fast.solver == PROFILES["fast"]["solver"]
    assert fast.profile == "fast"
    # a request's profile replaces the model's, its flags win over both
    mixed = resolve_sampling({"profile": "fast", "steps": 9}, {"profile": "reference"})
    assert mixed.steps == 50 and mixed.cache == "none"
    assert resolve_sampling({"profile": "fast"}, {"cache": "none"}).cache == "none"


@pytest.mark.parametrize("layer, field", [
    ({"solver": "dpm"}, "solver"), ({"steps": 0}, "steps"), ({"steps": 2.5}, "steps"),
    ({"cache": "teacache"}, "cache"), ({"cache_threshold": -1.0}, "cache_threshold"),
    ({"quant": "int4"}, "quant"), ({"compile": "yes"}, "compile"),
    ({"profile": "turbo"}, "profile"), ({"sampler": "x"}, "sampler")])
def test_bad_values_name_their_field(layer, field):
    with pytest.raises(InvalidArgument) as err:
        resolve_sampling(layer)
    assert err.value.violations[0].field == field


def test_request_fields_and_the_older_spellings():
    params = generator_pb2.SamplingParams(profile="fast", solver="euler", steps=7,
                                          cache="dbcache", cache_threshold=0.2, quant="none",
                                          compile=False)
    layer = sampling_layer_from_proto(params)
    assert layer == {"profile": "fast", "solver": "euler", "steps": 7, "cache": "dbcache",
                     "cache_threshold": 0.2, "quant": "none", "compile": False}
    assert sampling_layer_from_proto(generator_pb2.SamplingParams()) == {}
    assert sampling_layer_from_proto(generator_pb2.SamplingParams(num_steps=4,
                                                                  scheduler="unipc")) == {
        "steps": 4, "solver": "unipc"}
    with pytest.raises(InvalidArgument) as err:
        sampling_layer_from_proto(generator_pb2.SamplingParams(num_steps=4, steps=5))
    assert err.value.violations[0].field == "sampling.steps"
    with pytest.raises(InvalidArgument) as err:
        sampling_layer_from_proto(generator_pb2.SamplingParams(quant="fp4"))
    assert err.value.violations[0].field == "sampling.quant"


def test_flags():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=0)
    add_sampling_flags(parser)
    args = parser.parse_args(["--profile", "fast", "--solver", "euler", "--steps", "6",
                              "--cache", "dbcache-taylorseer", "--cache-threshold", "0.1",
                              "--quant", "fp8", "--no-compile"])
    assert sampling_layer_from_flags(args) == {
        "profile": "fast", "solver": "euler", "steps": 6, "cache": "dbcache-taylorseer",
        "cache_threshold": 0.1, "quant": "fp8", "compile": False}
    assert sampling_layer_from_flags(parser.parse_args([])) == {}
    assert sampling_layer_from_flags(parser.parse_args(["--compile"])) == {"compile": True}
    with pytest.raises(InvalidArgument) as err:
        sampling_layer_from_flags(parser.parse_args(["--cache-threshold", "0"]))
    assert err.value.violations[0].field == "--cache-threshold"
