"""The success judge on hand-made clips, agreement measures, Spearman, the labels CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from k4d.cli.main import main
from k4d_eval import policy
from k4d_eval.clip import Clip

# Camera looking along world +x from the origin: x_cam = -y, y_cam = -z, z_cam = x.
T_CAM_FROM_WORLD = np.array([[0, -1, 0, 0], [0, 0, -1, 0], [1, 0, 0, 0], [0, 0, 0, 1.0]])
H = W = 40


def _clip(heights, shifts=None):
    """A grey wall 2 m away and a red 8x8-pixel cube whose world height follows
    `heights` (and y position `shifts`), drawn where it projects (f = 40 px)."""
    T = len(heights)
    shifts = np.zeros(T) if shifts is None else np.asarray(shifts)
    rgb = np.full((T, H, W, 3), 120, np.uint8)
    pm = np.zeros((T, H, W, 3), np.float32)
    v, u = np.mgrid[0:H, 0:W]
    pm[..., 0] = (u - 19.5) / 40 * 2.0
    pm[..., 1] = (v - 19.5) / 40 * 2.0
    pm[..., 2] = 2.0
    ids = np.full((T, H, W), -1, np.int16)
    for t in range(T):
        world = np.array([1.0, shifts[t], heights[t]])
        cam = T_CAM_FROM_WORLD[:3, :3] @ world
        uc, vc = 40 * cam[0] / cam[2] + 19.5, 40 * cam[1] / cam[2] + 19.5
        box = (abs(u - uc) < 4) & (abs(v - vc) < 4)
        rgb[t][box] = (220, 30, 30)
        pm[t][box] = cam
        ids[t][box] = 1
    return Clip(rgb=rgb, pointmap=pm, valid=np.ones((T, H, W), bool), object_ids=ids,
                T_cam_from_world=np.repeat(T_CAM_FROM_WORLD[None], T, 0))


def test_pick_judge_reads_lift_and_rest_from_the_pointmap():
    picked = _clip([0.0, 0.04, 0.09, 0.09, 0.04, 0.0], [0, 0, 0, 0.05, 0.1, 0.1])
    verdict = policy.judge(picked, picked.object_ids[0], "pick", T_CAM_FROM_WORLD)
    assert verdict["success"] is True and verdict["lift_m"] == pytest.approx(0.09, abs=1e-6)
    untouched = _clip([0.0] * 6)
    assert policy.judge(untouched, untouched.object_ids[0], "pick", T_CAM_FROM_WORLD)["success"] is False
    dropped_high = _clip([0.0, 0.05, 0.09, 0.09, 0.09, 0.09])  # never put down
    assert policy.judge(dropped_high, dropped_high.object_ids[0], "pick",
                        T_CAM_FROM_WORLD)["success"] is False


def test_push_judge_uses_the_direction_in_the_task_text():
    pushed = _clip([0.0] * 4, [0, 0.04, 0.08, 0.1])  # +y = "left"
    ids0 = pushed.object_ids[0]
    assert policy.judge(pushed, ids0, "push", T_CAM_FROM_WORLD, "push the cube left")["success"]
    assert not policy.judge(pushed, ids0, "push", T_CAM_FROM_WORLD, "push the cube right")["success"]


def test_judge_without_a_rule_or_object_says_so():
    clip = _clip([0.0] * 3)
    assert policy.judge(clip, clip.object_ids[0], "import", T_CAM_FROM_WORLD)["success"] is None
    assert policy.judge(clip, np.full((H, W), -1), "pick", T_CAM_FROM_WORLD)["success"] is None


def test_agreement_known_values_and_spearman():
    a = policy.agreement([True, True, False, False, True], [True, False, False, True, True])
    assert a["accuracy"] == 0.6 and a["precision"] == pytest.approx(2 / 3)
    assert a["recall"] == pytest.approx(2 / 3) and a["success_rate_gap"] == 0.0
    assert policy.rank_correlation([0.1, 0.5, 0.9], [0.2, 0.6, 0.7]) == 1.0
    assert policy.rank_correlation([0.1, 0.5, 0.9], [0.9, 0.6, 0.2]) == -1.0
    assert policy.rank_correlation([0.1, 0.5, 0.9, 0.3], [0.2, 0.1, 0.7, 0.3]) == pytest.approx(0.4)  # 1 - 6*6/(4*15)


def test_agreement_cli_per_task_and_policy(tmp_path, capsys):
    rows = [{"policy": p, "task": "pick", "scene": "s1", "true_success": t, "simulated_success": s}
            for p, t, s in [("a", 1, 1), ("a", 0, 1), ("b", 1, 1), ("b", 1, 1), ("c", 0, 0),
                            ("c", 0, 1)]]
    labels = tmp_path / "labels.csv"
    labels.write_text("policy,task,scene,true_success,simulated_success\n" +
                      "".join(f"{r['policy']},{r['task']},{r['scene']},{r['true_success']},"
                              f"{r['simulated_success']}\n" for r in rows))
    assert main(["eval", "agreement", str(labels), "--out", str(tmp_path / "o")]) == 0
    out = json.loads((tmp_path / "o" / "agreement.json").read_text())
    assert out["agreement"]["accuracy"] == pytest.approx(4 / 6)
    assert out["per_policy"]["b"]["success_rate_true"] == 1.0
    assert out["per_task"]["pick"]["success_rate_gap"] == pytest.approx(5 / 6 - 3 / 6)
    # true rates a .5, b 1, c 0; simulated a 1, b 1, c .5 -> ranks agree up to a tie
    assert out["spearman"] == pytest.approx(0.8660254, abs=1e-6)
    bad = tmp_path / "bad.csv"
    bad.write_text("policy,true_success,simulated_success\na,maybe,1\n")
    assert main(["eval", "agreement", str(bad), "--out", str(tmp_path / "o2")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_summary_lists_the_policy_section():
    from k4d_eval.report import summary_markdown

    section = policy.agreement_table([
        {"policy": "a", "true_success": True, "simulated_success": True},
        {"policy": "b", "true_success": False, "simulated_success": True}])
    section["judge_on_ground_truth"] = policy.agreement([True, False], [True, False])
    text = summary_markdown({"method": "m", "metrics": {}, "regions": {}, "baseline": None,
                             "counts": {"episodes": 2, "frames": 10}, "settings": {"tau": 0.01},
                             "policy": section})
    assert "- accuracy: 0.5000" in text and "- success rate gap: 0.5000" in text
    assert "judge on ground truth vs labels: accuracy 1.0000 over 2" in text
    assert "Spearman" not in text  # simulated rates tie (1.0, 1.0): rho is undefined


def test_judge_abstentions_are_counted_with_their_reason_in_summary_md():
    """The judge cannot find the object in one prediction (it vanished after frame 0):
    that episode is left out of the agreement, and summary.md says so, with the reason."""
    from k4d_eval.evaluate import EpisodeResult
    from k4d_eval.report import build_report, summary_markdown

    results = []
    for i, vanish in enumerate((False, True)):
        gt = _clip([0.0, 0.04, 0.09, 0.09, 0.04, 0.0])
        gt.meta = {"task": "pick the red cube", "task_kind": "pick", "success": True}
        pred = _clip([0.0, 0.04, 0.09, 0.09, 0.04, 0.0])
        if vanish:
            pred.rgb[1:] = 120  # the cube is gone from every later frame
        result = EpisodeResult(f"ep{i}", gt.frames)
        result.info["policy"] = policy.episode_labels(pred, gt)
        results.append(result)
    section = policy.agreement_section(results)
    abstained = section["judge_abstentions"]["prediction"]
    # The 8x8-pixel cube: a quarter of its 64 frame-0 pixels, capped at MIN_PIXELS (20).
    REASON = ("object 1 is not found after frame 0 (fewer than 16 pixels of its colour with "
              "points near where it was last seen)")
    assert abstained == {"count": 1, "episodes": 2,
                         "reasons": {REASON: 1}}
    assert section["judge_abstentions"]["ground_truth"]["count"] == 0
    assert section["agreement"]["episodes"] == 1  # the abstention is not scored
    report = build_report(results, {"tau": 0.01}, policy=section)
    text = summary_markdown(report)
    assert ("- judge abstained on 1 of 2 episode(s) (predictions), not counted above: "
            f"{REASON} (1)") in text


def test_episode_labels_check_the_goal_datagen_stores():
    """With `source.goal_xy` (k4d datagen writes it) a pick must also end within 4 cm of the
    marker, as the data engine's judge requires; without it only lift and rest are read."""
    # lifted and set down 10 cm to the left (world y): x = 1 m is the cube's depth
    gt = _clip([0.0, 0.04, 0.09, 0.09, 0.04, 0.0], [0, 0, 0, 0.05, 0.1, 0.1])
    pred = _clip([0.0, 0.04, 0.09, 0.09, 0.04, 0.0], [0, 0, 0, 0.05, 0.1, 0.1])
    gt.meta = {"task": "pick up the red cube", "task_kind": "pick", "success": True,
               "source": {}}
    assert policy.episode_labels(pred, gt)["simulated_success"] is True
    start = np.median(pred.pointmap[0][pred.object_ids[0] == 1], axis=0)
    world = np.linalg.inv(T_CAM_FROM_WORLD)[:3, :3] @ start
    for goal, ok in (([world[0], world[1] + 0.1], True), ([world[0], world[1] - 0.1], False)):
        gt.meta["source"] = {"goal_xy": goal}
        labels = policy.episode_labels(pred, gt)
        assert labels["simulated_success"] is ok and labels["judge_on_gt_success"] is ok
        assert "goal" in labels["judge"]["rule"]
    gt.meta["source"] = {"goal_xy": [float("nan"), 0.0]}  # unreadable: not checked
    assert "goal" not in policy.episode_labels(pred, gt)["judge"]["rule"]
