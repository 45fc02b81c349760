"""A model's options (k4d_model.json `extra`) as a typed schema: known keys with good values
pass; an unknown key or a bad value is one InvalidArgument naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from k4d.errors import InvalidArgument
from k4d_model.options import check_model_extra


def test_known_options_pass():
    extra = {"vae_decode": "split", "latent_target": "change", "first_frame": "given",
             "decode": "relative", "robot_rgb": "shaded", "refiner_threshold": 0.05}
    assert check_model_extra(extra) is extra


@pytest.mark.parametrize("extra, field", [
    ({"decode": "relatvie"}, "extra.decode"),
    ({"grasp_strength": 1}, "extra.grasp_strength"),
    ({"latent_target": "delta"}, "extra.latent_target"),
    ({"vae_decode": "joint"}, "extra.vae_decode"),
    ({"change_dilate": 1.5}, "extra.change_dilate"),
    ({"refiner_threshold": True}, "extra.refiner_threshold"),
    ({"latent_anchor": "yes"}, "extra.latent_anchor"),
    ({"latent_target": "tracks", "motion_scale": 0}, "extra.motion_scale"),
    ({"latent_target": "tracks", "motion_scale": "10"}, "extra.motion_scale"),
    ({"latent_target": "change", "motion_scale": 10.0}, "extra.motion_scale"),  # no motion
    ({"latent_target": "tracks", "motion_samples": 0}, "extra.motion_samples"),
    ({"latent_target": "tracks", "motion_samples": 9}, "extra.motion_samples"),
    ({"latent_target": "tracks", "motion_samples": 2.0}, "extra.motion_samples"),
    ({"latent_target": "tracks", "motion_samples": True}, "extra.motion_samples"),
    ({"latent_target": "change", "motion_samples": 4}, "extra.motion_samples"),  # no motion
])
def test_unknown_keys_and_bad_values_are_refused_by_name(extra, field):
    with pytest.raises(InvalidArgument) as err:
        check_model_extra(extra)
    assert [v.field for v in err.value.violations] == [field]


@pytest.mark.parametrize("option", [{"refiner": "change"}, {"refiner_pointmap": "change"},
                                    {"decode": "input"}])
def test_a_tracks_model_refuses_options_that_redraw_its_frames(option):
    """latent_target tracks draws frames t >= 1 from the sampled motion; an option that draws
    them from something else would hide it."""
    assert check_model_extra({"latent_target": "tracks", "decode": "relative",
                              "motion_scale": 10.0})
    with pytest.raises(InvalidArgument, match="tracks") as err:
        check_model_extra({"latent_target": "tracks", **option})
    assert [v.field for v in err.value.violations] == [f"extra.{next(iter(option))}"]


def test_a_tracks_model_may_have_a_sample_refiner_that_reads_its_own_samples():
    """`cascade` on a tracks model: the refiner reads its frames; the samples it reads are
    its own config's, so `motion_samples` beside it is refused."""
    extra = {"latent_target": "tracks", "decode": "relative", "cascade": "colour"}
    assert check_model_extra(extra) is extra
    with pytest.raises(InvalidArgument, match="sample refiner") as err:
        check_model_extra({**extra, "motion_samples": 2})
    assert [v.field for v in err.value.violations] == ["extra.motion_samples"]


def test_a_tracks_model_may_average_its_motion_samples():
    extra = {"latent_target": "tracks", "decode": "relative", "motion_samples": 4}
    assert check_model_extra(extra) is extra
    assert check_model_extra({"latent_target": "change", "motion_samples": 1})  # the default


def test_extra_must_be_an_object():
    with pytest.raises(InvalidArgument, match="extra"):
        check_model_extra(["grasp"])


@pytest.mark.parametrize("key, value", [
    ("grasp", "rigid"), ("grasp_release", "settle"), ("push", "quasi-static"),
    ("estimated_objects", "fitted"), ("refiner_objects", "kept"), ("object_radius_m", [0.018, 0.028]),
    ("plane_mode_share", 0.1), ("change_near_robot_px", 4), ("object_pixels", "learned"),
])
def test_the_removed_world_rules_are_unknown_options(key, value):
    """The hand-written tabletop priors left the model (ADR 020): a model that still sets
    one is refused at load, not silently run without it."""
    with pytest.raises(InvalidArgument) as err:
        check_model_extra({key: value})
    assert [v.field for v in err.value.violations] == [f"extra.{key}"]


def test_the_options_import_without_torch():
    """The trainer's control plane validates recipes with the options and has no torch (its
    image installs the model library without the `torch` extra): importing them loads no
    torch, diffusers or numpy."""
    code = ("import sys, k4d_model.options\n"
            "print(sorted({'torch', 'diffusers', 'numpy'} & {m.split('.')[0] for m in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
