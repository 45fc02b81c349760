"""Renderer tests on hand-posed primitives: analytic depth/masks, z-buffering, exactness of
the ray culling against brute-force casting, distortion, engines, colours, bad input."""

import numpy as np
import pytest
import trimesh
from k4d.camera import Camera, look_at_transform
from k4d.errors import InvalidArgument, NotFound, ResourceExhausted
from k4d.pointmap_codec import invert_rigid
from k4d.robots.model import LinkGeometry
from k4d_projection.engines import is_embree_available
from k4d_projection.meshes import _unit_scale, build_link_meshes
from k4d_projection.renderer import RobotRenderer, estimate_bytes


def geom(link, primitive=None, size=(), mesh_path=None, rgba=(0.7, 0.7, 0.7, 1.0), T=None):
    return LinkGeometry(link_name=f"l{link}", link_index=link, mesh_path=mesh_path,
                        primitive=primitive, size=size,
                        T_link_from_geom=np.eye(4) if T is None else T,
                        scale=(1.0, 1.0, 1.0), rgba=rgba)


def translation(x, y, z):
    T = np.eye(4)
    T[:3, 3] = (x, y, z)
    return T


def random_rotation(rng):
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q *= np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] *= -1
    return q


def brute_force(renderer, poses, camera):
    """Independent reference: per frame ONE Open3D scene of posed triangles, every pixel."""
    import open3d as o3d

    d = camera.ray_directions().astype(np.float32)
    rays = o3d.core.Tensor(np.concatenate([np.zeros_like(d), d], -1))
    depth, link_id = [], []
    for t in range(poses.shape[0]):
        scene = o3d.t.geometry.RaycastingScene()
        ids = []
        for mesh in renderer.link_meshes:
            T = camera.T_cam_from_base @ poses[t, mesh.link_index]
            v = (mesh.vertices.astype(np.float64) @ T[:3, :3].T + T[:3, 3]).astype(np.float32)
            scene.add_triangles(o3d.core.Tensor(v), o3d.core.Tensor(mesh.faces))
            ids.append(mesh.link_index)
        out = scene.cast_rays(rays)
        th, g = out["t_hit"].numpy(), out["geometry_ids"].numpy()
        hit = np.isfinite(th)
        depth.append(np.where(hit, th, 0.0))
        link_id.append(np.where(hit, np.array(ids + [-1])[np.minimum(g, len(ids))], -1))
    return np.stack(depth), np.stack(link_id)


def test_box_depth_mask_pointmap_and_normals_are_analytic():
    cam = Camera(width=121, height=81, fx=100.0, fy=90.0, cx=60.3, cy=40.2)
    renderer = RobotRenderer(["base"], [geom(0, "box", (0.4, 0.3, 0.2), rgba=(1, 0, 0, 1))])
    res = renderer.render(translation(0.0, 0.0, 2.0)[None, None], cam)
    u, v = np.meshgrid(np.arange(121), np.arange(81))
    x_n, y_n = (u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy
    expected = (np.abs(x_n * 1.9) <= 0.2) & (np.abs(y_n * 1.9) <= 0.15)
    np.testing.assert_array_equal(res.mask[0], expected)
    np.testing.assert_allclose(res.depth[0][expected], 1.9, atol=1e-6)
    assert np.all(res.depth[0][~expected] == 0) and np.all(res.link_id[0][~expected] == -1)
    assert np.all(res.link_id[0][expected] == 0)
    pm = res.pointmap[0]
    np.testing.assert_allclose(pm[..., 0][expected], (x_n * 1.9)[expected], atol=1e-6)
    np.testing.assert_allclose(pm[..., 2], res.depth[0], atol=0)
    assert np.all(pm[~expected] == 0)
    np.testing.assert_allclose(res.normals[0][expected], [[0, 0, -1]] * expected.sum(), atol=1e-6)
    centre = res.rgb[0, 40, 60]
    assert centre[0] >= 250 and centre[1] == 0 and centre[2] == 0  # cos ~ 1 at the centre
    assert np.all(res.rgb[0][~expected] == 0)


def test_nearer_link_wins_the_z_buffer():
    cam = Camera(width=40, height=30, fx=40.0, fy=40.0, cx=19.5, cy=14.5)
    renderer = RobotRenderer(["a", "b"], [geom(0, "box", (1, 1, 0.1)), geom(1, "sphere", (0.2,))])
    poses = np.stack([translation(0, 0, 3.0), translation(0, 0, 2.0)])[None]
    res = renderer.render(poses, cam)
    assert res.link_id[0, 15, 20] == 1 and res.depth[0, 15, 20] == pytest.approx(1.8, abs=5e-3)  # tessellated sphere
    assert res.link_id[0, 15, 25] == 0 and res.depth[0, 15, 25] == pytest.approx(2.95, abs=1e-5)


def test_culled_casting_equals_brute_force_on_random_poses_incl_straddling_and_behind():
    rng = np.random.default_rng(3)
    cam = Camera.from_fovy(70.0, 96, 64, T_cam_from_world=look_at_transform([0, 0, 0], [0, 0, 1],
                                                                           up=(0, -1, 0)))
    renderer = RobotRenderer(["a", "b", "c"], [
        geom(0, "box", (0.5, 0.2, 0.3)), geom(1, "cylinder", (0.1, 0.6)),
        geom(2, "sphere", (0.15,)), geom(2, "box", (0.05, 0.05, 0.4), T=translation(0, 0, 0.2))])
    T = 12
    poses = np.zeros((T, 3, 4, 4))
    for t in range(T):
        for link in range(3):
            poses[t, link] = translation(*rng.uniform([-0.6, -0.4, -0.5], [0.6, 0.4, 2.5]))
            poses[t, link, :3, :3] = random_rotation(rng)
    poses[0, 0, :3, 3] = (0, 0, 0.05)  # straddles the image plane
    poses[1, 1, :3, 3] = (0, 0, -2.0)  # entirely behind the camera
    res = renderer.render(poses, cam)
    depth, link_id = brute_force(renderer, poses, cam)
    np.testing.assert_array_equal(res.mask, depth > 0)
    np.testing.assert_array_equal(res.link_id, link_id)
    np.testing.assert_allclose(res.depth, depth, atol=2e-5)
    assert res.mask.any()


def test_distorted_camera_points_project_back_to_their_pixels():
    cam = Camera(width=80, height=60, fx=60.0, fy=60.0, cx=40.1, cy=29.7,
                 distortion=(-0.3, 0.1, 0.002, -0.001, -0.02))
    renderer = RobotRenderer(["a"], [geom(0, "sphere", (0.5,))])
    res = renderer.render(translation(0.2, 0.1, 1.5)[None, None], cam)
    assert res.mask[0].sum() > 500
    vs, us = np.nonzero(res.mask[0])
    uv = cam.project(res.pointmap[0][vs, us])
    np.testing.assert_allclose(uv[:, 0], us, atol=1e-3)
    np.testing.assert_allclose(uv[:, 1], vs, atol=1e-3)
    depth, _ = brute_force(renderer, translation(0.2, 0.1, 1.5)[None, None], cam)
    np.testing.assert_array_equal(res.mask, depth > 0)


@pytest.mark.skipif(not is_embree_available(), reason="embreex not installed")
def test_embree_engine_matches_open3d():
    cam = Camera.from_fovy(60.0, 64, 48, T_cam_from_world=look_at_transform([1.5, 0.5, 0.8],
                                                                           [0, 0, 0.2]))
    geoms = [geom(0, "box", (0.3, 0.3, 0.1)), geom(1, "cylinder", (0.05, 0.5))]
    poses = np.stack([np.eye(4), translation(0, 0, 0.3)])[None]
    a = RobotRenderer(["a", "b"], geoms, engine="open3d").render(poses, cam)
    b = RobotRenderer(["a", "b"], geoms, engine="embree").render(poses, cam)
    np.testing.assert_array_equal(a.link_id, b.link_id)
    np.testing.assert_allclose(a.depth, b.depth, atol=1e-5)


def test_world_pointmap_and_world_from_base():
    T_world_from_base = translation(0.5, -0.2, 0.1)
    T_world_from_base[:3, :3] = random_rotation(np.random.default_rng(0))
    T_cam_from_world = look_at_transform([2.0, 1.0, 1.5], [0.5, -0.2, 0.3])
    cam = Camera.from_fovy(50.0, 64, 48, T_cam_from_world=T_cam_from_world,
                           T_world_from_base=T_world_from_base)
    plain = Camera.from_fovy(50.0, 64, 48, T_cam_from_world=T_cam_from_world)
    renderer = RobotRenderer(["a"], [geom(0, "box", (0.3, 0.2, 0.4))])
    pose = translation(0.0, 0.1, 0.2)[None, None]
    res = renderer.render(pose, cam, outputs=["depth", "mask", "pointmap", "pointmap_world"])
    moved = renderer.render(T_world_from_base @ pose, plain)
    np.testing.assert_array_equal(res.mask, moved.mask)
    np.testing.assert_allclose(res.depth, moved.depth, atol=1e-5)
    m = res.mask[0]
    p_cam = np.concatenate([res.pointmap[0][m], np.ones((m.sum(), 1))], 1)
    np.testing.assert_allclose(res.pointmap_world[0][m],
                               (p_cam @ invert_rigid(T_cam_from_world).T)[:, :3], atol=1e-5)
    assert res.normals is None and res.rgb is None


def test_mesh_files_with_their_own_colours(tmp_path):
    box = trimesh.creation.box(extents=(0.2, 0.2, 0.2))
    box.visual.face_colors = [0, 255, 0, 255]
    box.export(tmp_path / "green.ply")
    trimesh.creation.icosphere(radius=0.1).export(tmp_path / "plain.stl")
    geoms = [geom(0, mesh_path=str(tmp_path / "green.ply"), rgba=(1, 0, 0, 1)),
             geom(1, mesh_path=str(tmp_path / "plain.stl"), rgba=(0, 0, 1, 1))]
    meshes = build_link_meshes(geoms, 2)
    np.testing.assert_allclose(meshes[0].face_rgb, [[0, 1, 0]] * 12)  # file colour wins
    np.testing.assert_allclose(meshes[1].face_rgb[0], [0, 0, 1])  # URDF colour otherwise
    with pytest.raises(NotFound):
        build_link_meshes([geom(0, mesh_path=str(tmp_path / "missing.stl"))], 1)
    (tmp_path / "broken.stl").write_bytes(b"solid x\nfacet nonsense\n")
    with pytest.raises((InvalidArgument, NotFound)):
        build_link_meshes([geom(0, mesh_path=str(tmp_path / "broken.stl"))], 1)
    assert _unit_scale("0.001 * meters") == pytest.approx(0.001)
    assert _unit_scale("meters") == 1.0


def test_bad_inputs_are_rejected_clearly():
    cam = Camera.from_fovy(60.0, 32, 24)
    renderer = RobotRenderer(["a", "b"], [geom(0, "sphere", (0.1,))])
    with pytest.raises(InvalidArgument, match=r"\(T, 2, 4, 4\)"):
        renderer.render(np.tile(np.eye(4), (1, 3, 1, 1)), cam)
    nan = np.tile(np.eye(4), (1, 2, 1, 1))
    nan[0, 1, 0, 3] = np.nan
    with pytest.raises(InvalidArgument, match="NaN"):
        renderer.render(nan, cam)
    scaled = np.tile(np.eye(4), (2, 2, 1, 1))
    scaled[1, 0, :3, :3] *= 1.5
    with pytest.raises(InvalidArgument) as err:
        renderer.render(scaled, cam)
    assert err.value.violations[0].field == "poses[1][0]"
    with pytest.raises(InvalidArgument, match="outputs"):
        renderer.render(np.tile(np.eye(4), (1, 2, 1, 1)), cam, outputs=["depth", "colour"])
    big = Camera.from_fovy(60.0, 4096, 4096)
    with pytest.raises(ResourceExhausted, match="memory budget"):
        renderer.render(np.tile(np.eye(4), (49, 2, 1, 1)), big)
    assert estimate_bytes(49, 480, 720, ["depth"]) < 4 << 30
    with pytest.raises(InvalidArgument, match="link_index"):
        RobotRenderer(["a"], [geom(3, "sphere", (0.1,))])
    with pytest.raises(InvalidArgument, match="primitive"):
        RobotRenderer(["a"], [geom(0, "cone", (0.1,))])
    with pytest.raises(InvalidArgument, match="engine"):
        RobotRenderer(["a"], [geom(0, "sphere", (0.1,))], engine="optix")


def test_panda_visual_meshes_equal_brute_force():
    from k4d.robots.descriptions import load_robot
    from k4d.robots.fk import forward_kinematics

    model = load_robot("panda")
    renderer = RobotRenderer.from_robot(model)
    rng = np.random.default_rng(7)
    joints = rng.uniform(model.lower, model.upper, size=(3, len(model.joint_names)))
    poses = forward_kinematics(model, joints)
    cam = Camera.look_at([0.9, 0.6, 0.7], [0.0, 0.0, 0.4], width=160, height=120, fovy_deg=70)
    res = renderer.render(poses, cam)
    depth, link_id = brute_force(renderer, poses, cam)
    np.testing.assert_array_equal(res.mask, depth > 0)
    np.testing.assert_array_equal(res.link_id, link_id)
    np.testing.assert_allclose(res.depth, depth, atol=2e-5)
    assert res.mask.mean() > 0.02
