"""The changed / static regions (issue 21) and the first-frame figure of a report."""

from __future__ import annotations

import numpy as np
from k4d_eval.clip import Clip
from k4d_eval.evaluate import Settings, evaluate_clips
from k4d_eval.regions import build_regions
from k4d_eval.report import build_report, goal_figures


def _scene(T=4, H=12, W=16):
    """Grey scene at 1 m; a red block moves right from frame 2; the robot covers the left
    columns in frame 0 only."""
    rgb = np.full((T, H, W, 3), 90, np.uint8)
    depth = np.ones((T, H, W), np.float32)
    for t in range(T):
        x = 8 + (2 if t >= 2 else 0)
        rgb[t, 4:7, x:x + 3] = (200, 20, 20)
        depth[t, 4:7, x:x + 3] = 0.9
    robot = np.zeros((T, H, W), bool)
    robot[0, :, :2] = True
    robot[3, :, 14:] = True
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    pointmap = np.stack([(u - 7.5) / 20 * depth, (v - 5.5) / 20 * depth, depth], -1)
    return Clip(rgb=rgb, pointmap=pointmap.astype(np.float32), valid=depth > 0, depth=depth,
                robot_mask=robot)


def test_changed_is_where_ground_truth_left_frame_0_outside_the_robot():
    gt = _scene()
    regions = build_regions(gt)
    changed, static = regions["changed"], regions["static"]
    assert not changed[:2].any()                      # nothing moved yet
    assert changed[2, 5, 8] and changed[2, 5, 12]     # where it was and where it is now
    assert not changed[2, 5, 10]                      # red both times
    assert not (changed | static)[:, :, :2].any()     # robot in frame 0: neither region
    assert not (changed | static)[3, :, 14:].any()    # robot now: neither region
    outside = ~gt.robot_mask & ~gt.robot_mask[:1]
    assert np.array_equal(changed | static, outside) and not (changed & static).any()


def test_report_has_first_frame_psnr_and_region_mse():
    gt = _scene()
    pred = _scene()
    pred.rgb = pred.rgb.copy()
    pred.rgb[1:] = 90  # the block vanishes after frame 0; frame 0 is exact
    result = evaluate_clips(pred, gt, Settings(geometry_pixels=0), condition_robot_mask=gt.robot_mask)
    report = build_report([result], {"psnr_max_db": 100.0})
    assert report["first_frame"]["psnr_min"] == 100.0  # exact frame 0, capped
    changed = report["regions"]["changed"]
    assert changed["mse"] > 0 and report["regions"]["static"]["psnr"] < 100.0


def test_generated_frames_only_leave_frame_0_out():
    gt = _scene()
    pred = _scene()
    pred.rgb = pred.rgb.copy()
    pred.rgb[1:] = pred.rgb[1:] // 2 + 40  # frame 0 exact, every later frame off
    result = evaluate_clips(pred, gt, Settings(geometry_pixels=0))
    report = build_report([result], {"psnr_max_db": 100.0})
    all_frames = report["regions"]["static"]["psnr"]
    generated = report["regions_generated"]["static"]["psnr"]
    assert all_frames > generated + 10  # frame 0's capped 100 dB lifts the all-frame mean
    assert generated < 30


def test_goal_figures_read_the_generated_frames_beside_the_floor():
    gt = _scene()
    pred = _scene()
    pred.rgb = pred.rgb.copy()
    pred.rgb[1:] = pred.rgb[1:] // 2 + 40
    settings = Settings(geometry_pixels=0)
    report = build_report([evaluate_clips(pred, gt, settings)], {"psnr_max_db": 100.0},
                          baseline=[evaluate_clips(_scene(), gt, settings)])
    figures = goal_figures(report)
    assert figures["episodes"] == 1 and figures["frame0_psnr_min"] == 100.0
    assert figures["static_psnr"] == round(report["regions_generated"]["static"]["psnr"], 4)
    assert figures["static_psnr_all_frames"] > figures["static_psnr"] + 10
    assert figures["static_psnr_floor"] == 100.0  # the true scene as the "floor"
    assert figures["changed_mse"] > 0 and figures["changed_mse_floor"] == 0
    assert figures["success_agreement"] is None and figures["judge_abstained"] == 0


def _scene_with_ids():
    """_scene's red block as object 1 (frame 0 at x 8-10, from frame 2 at 10-12), and a
    still object 2; the robot covers object 2's right column in frame 3."""
    gt = _scene()
    ids = np.full(gt.rgb.shape[:3], -1, np.int16)
    for t in range(gt.frames):
        x = 8 + (2 if t >= 2 else 0)
        ids[t, 4:7, x:x + 3] = 1
        ids[t, 9:11, 12:15] = 2
    gt.object_ids = ids
    return gt


def test_objects_split_into_arrived_left_and_stayed():
    gt = _scene_with_ids()
    regions = build_regions(gt, gt.robot_mask)
    arrived, left, stayed = (regions[f"objects_{part}"] for part in ("arrived", "left", "stayed"))
    # each pixel of `objects` in exactly one part
    assert np.array_equal(arrived | left | stayed, regions["objects"])
    assert not (arrived & left).any() and not (arrived & stayed).any() and not (left & stayed).any()
    assert not (arrived | left)[:2].any()          # nothing moved before frame 2
    assert arrived[2, 5, 11] and arrived[2, 5, 12]  # where the block came
    assert left[2, 5, 8] and left[2, 5, 9]          # where it stood
    assert stayed[2, 5, 10]                         # block on block: the same object
    assert stayed[1:, 9, 12].all()                  # the still object
    assert not stayed[3, 9, 14]                     # ... but not under the robot
    assert not (arrived | left | stayed)[gt.robot_mask].any()


def test_goal_figures_split_the_objects_error():
    gt = _scene_with_ids()
    pred = _scene_with_ids()
    pred.rgb = pred.rgb.copy()
    pred.rgb[2:, 4:7, 8:10] = 90  # the block fades where it stood, and is not drawn where it came
    pred.rgb[2:, 4:7, 10:13] = 90
    settings = Settings(geometry_pixels=0)
    floor = _scene_with_ids()
    floor.rgb = np.repeat(floor.rgb[:1], gt.frames, axis=0)  # frame 0 copied
    report = build_report([evaluate_clips(pred, gt, settings, condition_robot_mask=gt.robot_mask)],
                          {"psnr_max_db": 100.0},
                          baseline=[evaluate_clips(floor, gt, settings,
                                                   condition_robot_mask=gt.robot_mask)])
    figures = goal_figures(report)
    assert figures["objects_left_mse"] == 0 < figures["objects_left_mse_floor"]
    assert figures["objects_arrived_mse"] == figures["objects_arrived_mse_floor"] > 0
    assert figures["objects_stayed_mse"] > figures["objects_stayed_mse_floor"] == 0
