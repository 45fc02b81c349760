"""The pointmap judge's object tracker on a tabletop seen from above-front: a two-tone
object on a table of nearly its own colour, carried across the image between two frames."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera
from k4d_tabletop.judge import JudgeClip, judge, object_track

H, W = 60, 90


def _tabletop(positions, top=(235, 235, 235), side=(180, 180, 175), table=(170, 170, 168)):
    """A camera 1 m above and behind the table (z = 0) looking at (0.5, 0, 0); a 4 cm box
    at each frame's world xyz (its centre); the table fills the rest."""
    cam = Camera.look_at((-0.3, 0.0, 0.8), (0.5, 0.0, 0.0), width=W, height=H, fx=70.0,
                         fy=70.0, cx=(W - 1) / 2, cy=(H - 1) / 2)
    T_cam_from_world = cam.T_cam_from_world
    T_world_from_cam = np.linalg.inv(T_cam_from_world)
    rays = cam.ray_directions()
    rays_w = rays @ T_world_from_cam[:3, :3].T
    origin = T_world_from_cam[:3, 3]
    T = len(positions)
    rgb = np.zeros((T, H, W, 3), np.uint8)
    points = np.zeros((T, H, W, 3), np.float32)
    ids = np.full((T, H, W), -1, np.int16)
    for t, centre in enumerate(np.asarray(positions, float)):
        lo, hi = centre - 0.02, centre + 0.02
        # slab intersection of every ray with the box, else the table plane z = 0
        with np.errstate(divide="ignore", invalid="ignore"):
            t0, t1 = (lo - origin) / rays_w, (hi - origin) / rays_w
        near = np.nanmax(np.minimum(t0, t1), axis=-1)
        far = np.nanmin(np.maximum(t0, t1), axis=-1)
        hit = (near <= far) & (far > 0)
        table_s = -origin[2] / rays_w[..., 2]
        s = np.where(hit, near, table_s)
        world = origin + rays_w * s[..., None]
        on_top = hit & (np.abs(world[..., 2] - hi[2]) < 1e-6)
        rgb[t] = np.where(hit[..., None], np.where(on_top[..., None], top, side), table)
        points[t] = (world - T_world_from_cam[:3, 3]) @ T_world_from_cam[:3, :3]
        ids[t][hit] = 1
    return JudgeClip(rgb, points, np.ones((T, H, W), bool)), ids, T_cam_from_world


def test_two_tone_object_on_a_table_of_its_colour_is_tracked():
    path = [(0.5, 0.0, 0.02)] * 2 + [(0.5, -0.03, 0.02), (0.5, -0.06, 0.02)]
    clip, ids, T_cam = _tabletop(path)
    start = ids[0] == 1
    colour = np.median(clip.rgb[0][start].astype(np.float32), axis=0)
    track = object_track(clip, colour, start, np.linalg.inv(T_cam))
    assert not np.isnan(track).any()
    np.testing.assert_allclose(track[:, 1], [p[1] for p in path], atol=0.015)
    verdict = judge(clip, ids[0], "push", T_cam, "push the grey cube right")
    assert verdict["success"] is False  # 6 cm < the 8.4 cm a push needs


def test_a_carried_object_is_found_again_after_a_long_jump():
    path = [(0.5, 0.0, 0.02), (0.5, 0.0, 0.1), (0.45, -0.22, 0.1), (0.45, -0.22, 0.02)]
    clip, ids, T_cam = _tabletop(path, top=(220, 40, 40), side=(160, 30, 30))
    verdict = judge(clip, ids[0], "pick", T_cam)
    assert verdict["success"] is True
    assert verdict["lift_m"] > 0.05 and verdict["final_height_change_m"] < 0.02


def test_with_the_task_goal_a_pick_or_a_push_must_end_near_it():
    """The policy evaluator knows the task's goal (the place marker, the push target): the
    judge then requires it as the data engine's judge does; without it, as before."""
    path = [(0.5, 0.0, 0.02), (0.5, 0.0, 0.1), (0.45, -0.22, 0.1), (0.45, -0.22, 0.02)]
    clip, ids, T_cam = _tabletop(path, top=(220, 40, 40), side=(160, 30, 30))
    near = judge(clip, ids[0], "pick", T_cam, goal_xy=(0.46, -0.20))
    assert near["success"] is True and near["goal_error_m"] < 0.04
    far = judge(clip, ids[0], "pick", T_cam, goal_xy=(0.45, -0.12))
    assert far["success"] is False and 0.08 < far["goal_error_m"] < 0.12
    assert "goal" in far["rule"]
    push = [(0.5, 0.0, 0.02), (0.5, -0.05, 0.02), (0.5, -0.1, 0.02)]
    clip, ids, T_cam = _tabletop(push)
    assert judge(clip, ids[0], "push", T_cam, "push the grey cube right")["success"] is True
    assert judge(clip, ids[0], "push", T_cam, "push the grey cube right",
                 goal_xy=(0.5, -0.2))["success"] is False  # 10 cm short of the goal


def test_with_the_known_start_the_judge_reads_displacements_not_the_visible_surface():
    """The median of the visible points is the box's top and front, ~1 cm off its centre
    towards the camera; a pick that ends 3.5 cm from its goal (centre to goal) is judged
    from that offset without the start, and from the centre's own track with it."""
    goal = (0.45, -0.22 + 0.035)
    path = [(0.5, 0.0, 0.02), (0.5, 0.0, 0.1), (0.45, -0.22, 0.1), (0.45, -0.22, 0.02)]
    clip, ids, T_cam = _tabletop(path, top=(220, 40, 40), side=(160, 30, 30))
    seen = object_track(clip, None, ids[0] == 1, np.linalg.inv(T_cam))
    offset = float(np.linalg.norm(seen[0] - path[0]))
    assert offset > 0.005  # the visible surface is not the centre
    known = judge(clip, ids[0], "pick", T_cam, goal_xy=goal, start_xyz={1: path[0]})
    assert known["goal_error_m"] == pytest.approx(0.035, abs=0.005)
    unknown = judge(clip, ids[0], "pick", T_cam, goal_xy=goal)
    assert abs(unknown["goal_error_m"] - 0.035) > abs(known["goal_error_m"] - 0.035)
    # lifts and rests are differences already: the same either way
    assert known["lift_m"] == pytest.approx(unknown["lift_m"])
