"""EpisodeMeta holds `k4d.camera.Camera`s (issue 19 point 2): the stored JSON is parsed by
Camera's own validator, round trips, and a bad camera names its field."""

import json

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.episodes import EpisodeMeta
from k4d.errors import InvalidArgument

T, H, W = 3, 6, 8
CAMERA = Camera.look_at((1.0, 0.5, 0.8), (0.0, 0.0, 0.1), width=W, height=H, fovy_deg=60.0,
                        distortion=(0.1, -0.02, 0.001, 0.0, 0.0))


def _meta(camera) -> EpisodeMeta:
    return EpisodeMeta(episode_id="ep", frames=T, height=H, width=W, fps=10.0, task="t",
                       task_kind="push", success=None, success_judge="", robot="panda",
                       joint_names=["j0"], actions={}, camera=camera)


def test_the_camera_json_becomes_a_camera_and_round_trips():
    meta = _meta(CAMERA.to_dict())
    assert isinstance(meta.camera, Camera) and meta.camera == CAMERA
    assert meta.camera_at(2) is meta.camera
    stored = json.loads(json.dumps(meta.to_dict()))
    assert stored["camera"] == CAMERA.to_dict()
    assert EpisodeMeta.from_dict(stored) == meta


def test_a_moving_camera_is_one_camera_per_frame():
    cameras = []
    for t in range(T):
        T_cam_from_world = CAMERA.T_cam_from_world.copy()
        T_cam_from_world[0, 3] += 0.1 * t
        cameras.append(Camera.from_dict({**CAMERA.to_dict(), "T_cam_from_world": T_cam_from_world.tolist()}))
    meta = EpisodeMeta.from_dict(json.loads(json.dumps(_meta(cameras).to_dict())))
    assert [c.T_cam_from_world[0, 3] for c in meta.camera] == pytest.approx(
        [CAMERA.T_cam_from_world[0, 3] + 0.1 * t for t in range(T)])
    assert meta.camera_at(1) == cameras[1]


@pytest.mark.parametrize("camera, field", [
    ({**CAMERA.to_dict(), "fx": -1.0}, "meta.camera.fx"),
    ([CAMERA.to_dict(), {k: v for k, v in CAMERA.to_dict().items() if k != "width"}, CAMERA.to_dict()],
     "meta.camera[1].width"),
    ({**CAMERA.to_dict(), "T_cam_from_world": (2 * np.eye(4)).tolist()}, "meta.camera.T_cam_from_world"),
    ([], "meta.camera"),
    ("camera.json", "meta.camera"),
])
def test_a_bad_camera_names_its_field(camera, field):
    with pytest.raises(InvalidArgument) as err:
        EpisodeMeta.from_dict({**_meta(CAMERA).to_dict(), "camera": camera})
    assert err.value.violations[0].field == field


def test_a_camera_set_after_construction_is_checked_again():
    meta = _meta(CAMERA)
    meta.camera = [CAMERA.to_dict()] * (T - 1)
    with pytest.raises(InvalidArgument, match="per-frame camera list needs 3"):
        meta.validate()
