import os

import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny world model (5 x 32 x 48 clips, random weights) written by `k4d generate
    init-model`: the real generator pipeline, fast enough for the default test tier."""
    from k4d.cli.main import main

    out = tmp_path_factory.mktemp("models") / "tiny"
    assert main(["generate", "init-model", "--config", "tiny", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def bundle():
    from k4d_policy.scenes import robot_bundle

    return robot_bundle("panda")


@pytest.fixture(scope="session")
def pick_scene():
    from k4d_policy.scenes import scenario

    return scenario(7000, 0, "pick", 96, 144)
