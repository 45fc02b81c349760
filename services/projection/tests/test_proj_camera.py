import json
import math

import numpy as np
import pytest
from k4d.camera import Camera, look_at_transform
from k4d.errors import InvalidArgument
from k4d.pointmap_codec import invert_rigid
from k4d.rotations import euler_xyz_to_matrix


def test_from_fovy_uses_pixel_centre_convention():
    cam = Camera.from_fovy(45.0, 720, 480)
    assert cam.cx == pytest.approx(359.5) and cam.cy == pytest.approx(239.5)
    assert cam.fy == pytest.approx(240.0 / math.tan(math.radians(22.5)))
    assert cam.fx == cam.fy
    assert cam.fovy_deg == pytest.approx(45.0)


def test_look_at_puts_target_on_principal_point_and_up_is_up():
    cam = Camera.look_at([1.0, 0.5, 0.8], [0.2, -0.1, 0.3], width=640, height=480, fovy_deg=60)
    target = cam.T_cam_from_world @ np.array([0.2, -0.1, 0.3, 1.0])
    assert target[2] > 0
    np.testing.assert_allclose(cam.project(target[:3]), [cam.cx, cam.cy], atol=1e-9)
    above = cam.T_cam_from_world @ np.array([0.2, -0.1, 0.5, 1.0])  # world +z is image up
    assert cam.project(above[:3])[1] < cam.cy


def test_from_mujoco_matches_look_at():
    T = look_at_transform([1.0, 0.5, 0.8], [0.0, 0.0, 0.3])
    R_world_from_cam = T[:3, :3].T
    xmat = R_world_from_cam @ np.diag([1.0, -1.0, -1.0])  # MuJoCo camera axes
    cam = Camera.from_mujoco([1.0, 0.5, 0.8], xmat.ravel(), 50.0, 320, 240)
    np.testing.assert_allclose(cam.T_cam_from_world, T, atol=1e-12)


def test_droid_euler_convention_matches_scipy_extrinsic_xyz():
    from scipy.spatial.transform import Rotation

    euler = [0.3, -1.1, 2.0]
    np.testing.assert_allclose(euler_xyz_to_matrix(euler),
                               Rotation.from_euler("xyz", euler).as_matrix(), atol=1e-12)
    extr = [0.5, -0.2, 0.6, *euler]
    cam = Camera.from_droid(extr, width=1280, height=720, fx=520, fy=520, cx=640, cy=360)
    R = euler_xyz_to_matrix(euler)
    point_on_axis = np.array(extr[:3]) + 2.0 * R[:, 2]  # 2 m along the optical axis
    p_cam = (cam.T_cam_from_world @ np.append(point_on_axis, 1.0))[:3]
    np.testing.assert_allclose(p_cam, [0, 0, 2.0], atol=1e-12)


def test_json_round_trip(tmp_path):
    cam = Camera(width=64, height=48, fx=50.0, fy=51.0, cx=31.5, cy=23.5,
                 T_cam_from_world=look_at_transform([1, 1, 1], [0, 0, 0]),
                 distortion=(0.1, -0.05, 0.001, 0.002, 0.0), T_world_from_base=np.eye(4))
    cam.save(tmp_path / "cam.json")
    back = Camera.load(tmp_path / "cam.json")
    assert back.to_dict() == cam.to_dict()


def _cam_dict(**overrides):
    d = {"width": 64, "height": 48, "fx": 50.0, "fy": 50.0, "cx": 31.5, "cy": 23.5,
         "T_cam_from_world": np.eye(4).tolist()}
    d.update(overrides)
    return d


@pytest.mark.parametrize("overrides, field", [
    ({"fx": 0.0}, "camera.fx"),
    ({"fy": -3.0}, "camera.fy"),
    ({"cx": float("nan")}, "camera.cx"),
    ({"width": 0}, "camera.width"),
    ({"height": 100000}, "camera.height"),
    ({"width": 10.5}, "camera.width"),
    ({"T_cam_from_world": (np.eye(4) * 2).tolist()}, "camera.T_cam_from_world"),
    ({"T_cam_from_world": np.diag([1.0, 1.0, -1.0, 1.0]).tolist()}, "camera.T_cam_from_world"),
    ({"T_cam_from_world": [[1, 0, 0], [0, 1, 0]]}, "camera.T_cam_from_world"),
    ({"T_cam_from_world": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]},
     "camera.T_cam_from_world"),
    ({"distortion": [0.1, 0.2]}, "camera.distortion"),
    ({"focal": 3}, "camera.focal"),
])
def test_invalid_camera_names_the_field(overrides, field):
    with pytest.raises(InvalidArgument) as err:
        Camera.from_dict(_cam_dict(**overrides), field_prefix="camera")
    assert field in [v.field for v in err.value.violations]


def test_missing_fields_and_bad_json(tmp_path):
    d = _cam_dict()
    del d["fx"]
    with pytest.raises(InvalidArgument, match="fx"):
        Camera.from_dict(d)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        Camera.load(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    with pytest.raises(InvalidArgument):
        Camera.load(tmp_path / "list.json")


def test_distorted_rays_project_back_to_their_pixel_centres():
    cam = Camera(width=80, height=60, fx=70.0, fy=72.0, cx=39.2, cy=30.1,
                 distortion=(-0.25, 0.08, 0.001, -0.0015, -0.01))
    dirs = cam.ray_directions()
    uv = cam.project(dirs)
    u, v = np.meshgrid(np.arange(80), np.arange(60))
    np.testing.assert_allclose(uv[..., 0], u, atol=1e-6)
    np.testing.assert_allclose(uv[..., 1], v, atol=1e-6)
    assert np.all(dirs[..., 2] == 1.0)


def test_invert_rigid():
    T = look_at_transform([0.3, -2, 1], [0, 0.1, 0.2])
    np.testing.assert_allclose(invert_rigid(T) @ T, np.eye(4), atol=1e-12)
