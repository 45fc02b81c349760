"""The generation stage core: the model/backend rule both modes share, and sampling."""

import pytest
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d_generator.core import check_clip, choose_backend, run_generation, uses_model
from k4d_generator.service import ModelManager

SAMPLING = {"backend": "", "num_steps": 2, "seed": 7, "guidance": None, "scheduler": None,
            "shift": None}


def test_no_model_or_the_static_world_backend_is_static_world(make_robot):
    assert not uses_model("", "", "torch") and not uses_model("arm", "", STATIC_WORLD)
    manager = ModelManager(None, warm_up=False)
    sampling = choose_backend(manager, SAMPLING)
    assert sampling["backend"] == STATIC_WORLD and manager.loaded is None
    image, robot = make_robot()
    out = run_generation(manager, image, robot["robot_rgb"], robot["robot_pointmap"],
                         robot["robot_mask"], sampling)
    assert out.static_world and out.seed == 7 and out.model["name"] == STATIC_WORLD
    assert out.rgb.shape == robot["robot_rgb"].shape


def test_a_process_serving_one_model_refuses_another():
    manager = ModelManager(None, warm_up=False)
    with pytest.raises(FailedPrecondition, match="serves registry:tiny"):
        choose_backend(manager, SAMPLING, name="other", served_model="registry:tiny")


def test_the_job_model_is_loaded_once_and_its_clip_checked(tiny_model_dir, make_robot):
    manager = ModelManager(None, warm_up=False)
    sampling = choose_backend(manager, SAMPLING, uri=str(tiny_model_dir))
    loaded = manager.loaded
    assert sampling["backend"] == loaded.backend == "torch"
    assert choose_backend(manager, SAMPLING, uri=str(tiny_model_dir)) == sampling
    assert manager.loaded is loaded  # the same model, backend and precision: no reload
    info = loaded.pipeline.info
    check_clip(loaded, (info.num_frames, info.height, info.width))
    with pytest.raises(InvalidArgument) as exc:
        check_clip(loaded, (info.num_frames + 1, info.height, info.width))
    assert exc.value.violations[0].field == "spec.num_frames"
    image, robot = make_robot(info.num_frames, info.height, info.width)
    out = run_generation(manager, image, robot["robot_rgb"], robot["robot_pointmap"],
                         robot["robot_mask"], sampling)
    assert not out.static_world and out.rgb.shape[:3] == (info.num_frames, info.height,
                                                          info.width)
