"""Policy-evaluation agreement: does the world model judge rollouts the way reality does?

- An automatic success judge for the data engine's synthetic tasks: it finds the target
  object in a clip by its colour in frame 0 (its pixels there come from ground truth
  object_ids, what the initial scene shows), reads the object's 3D position from the
  clip's pointmap in that region frame by frame (median of its points, in the world frame
  of the camera JSON) and applies the data engine's rules (k4d_datagen.tasks.judge) as far
  as pointmaps show them:
    pick   lifted > LIFT_M at some frame and resting again at the end (final height within
           REST_M of the start); the place marker's position is not in the episode
           metadata, so "within 4 cm of the marker" is not checked
    push   moved >= PUSH_M along the direction named in the task text (left, right,
           forward, back), else horizontally
    stack  object 1 ends within STACK_XY_M of object 2 horizontally and >= STACK_Z_M above
           it, object 2 moved <= BASE_MOVED_M
  The same judge runs on the prediction and, as a check of the judge, on the ground truth.
- Agreement of simulated with true success: accuracy, precision, recall per episode, the
  success-rate gap per task and per scene, and the Spearman rank correlation of policies
  (or checkpoints) by simulated vs true success rate (the measure WorldGym and WorldEval use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from k4d_eval.clip import Clip

LIFT_M = 0.05
REST_M = 0.02
PUSH_M = 0.7 * 0.12   # 0.7 x the data engine's push distance
STACK_XY_M = 0.03
STACK_Z_M = 0.02
BASE_MOVED_M = 0.03
PUSH_DIRECTIONS = {"left": (0.0, 1.0), "right": (0.0, -1.0), "forward": (1.0, 0.0),
                   "back": (-1.0, 0.0)}
COLOUR_TOL = 40.0      # RGB distance from the object's frame-0 median colour
MIN_PIXELS = 20        # fewer matching pixels (or a quarter of its frame-0 pixels): unseen
SEARCH_RADIUS = 0.08   # tracking window, as a share of the image width
JUDGED_KINDS = ("pick", "push", "stack")


def object_track(clip: Clip, colour: np.ndarray, start: np.ndarray,
                 T_world_from_cam0: np.ndarray) -> np.ndarray:
    """(T, 3) world position of the object per frame (NaN where unseen): median of the
    clip's valid points whose colour is within COLOUR_TOL of `colour`, off the robot, near
    where the object was last seen (a window of SEARCH_RADIUS of the image width, or
    twice the object's size, around its last centroid). Frame 0 uses the object's known
    pixels `start` (H, W)."""
    T, (H, W) = clip.frames, clip.size
    track = np.full((T, 3), np.nan)
    R, tr = T_world_from_cam0[:3, :3], T_world_from_cam0[:3, 3]
    min_pixels = _min_pixels(start)
    radius = max(SEARCH_RADIUS * W, 2.0 * np.sqrt(start.sum()))
    vv, uu = np.mgrid[0:H, 0:W]
    centre = np.argwhere(start).mean(axis=0)
    for t in range(T):
        if t == 0:
            region = start & clip.valid[0]
        else:
            dist = np.linalg.norm(clip.rgb[t].astype(np.float32) - colour, axis=-1)
            near = (vv - centre[0]) ** 2 + (uu - centre[1]) ** 2 <= radius ** 2
            region = (dist < COLOUR_TOL) & near & clip.valid[t]
            if clip.robot_mask is not None:
                region &= ~clip.robot_mask[t]
        if region.sum() >= min_pixels:
            track[t] = np.median(clip.pointmap[t][region].astype(np.float64), axis=0) @ R.T + tr
            centre = np.argwhere(region).mean(axis=0)
    return track


def _min_pixels(start: np.ndarray) -> int:
    """Matching pixels a frame needs for the object to count as seen: a quarter of its
    frame-0 pixels, at least 3, at most MIN_PIXELS."""
    return int(np.clip(start.sum() // 4, 3, MIN_PIXELS))


def _final(track: np.ndarray) -> np.ndarray | None:
    seen = np.flatnonzero(~np.isnan(track[:, 0]))
    return track[seen[-1]] if len(seen) and seen[-1] > 0 else None


def _direction(task_text: str) -> np.ndarray | None:
    words = task_text.lower().replace(",", " ").replace(".", " ").split()
    for name, d in PUSH_DIRECTIONS.items():
        if name in words:
            return np.asarray(d)
    return None


def judge(clip: Clip, object_ids0: np.ndarray, task_kind: str,
          T_cam0_from_world: np.ndarray, task_text: str = "") -> dict:
    """-> {"success": bool | None, "rule": str, measured values}; success None when the
    task kind has no rule or an object cannot be found."""
    if task_kind not in JUDGED_KINDS or clip.pointmap is None:
        return {"success": None, "rule": f"no automatic rule for task kind {task_kind!r}"}
    T_world_from_cam0 = np.linalg.inv(T_cam0_from_world)
    tracks = {}
    for k in ((1, 2) if task_kind == "stack" else (1,)):
        start = object_ids0 == k
        if start.sum() < 3:
            return {"success": None, "rule": f"object {k} is not visible in frame 0 (fewer "
                                             "than 3 pixels)"}
        colour = np.median(clip.rgb[0][start].astype(np.float32), axis=0)
        tracks[k] = object_track(clip, colour, start, T_world_from_cam0)
    track = tracks[1]
    start1, end1 = track[0], _final(track)
    if end1 is None or np.isnan(start1[0]):
        return {"success": None, "rule": f"object 1 is not found after frame 0 (fewer than "
                                         f"{_min_pixels(object_ids0 == 1)} pixels of its colour "
                                         "with points near where it was last seen)"}
    if task_kind == "pick":
        lift = float(np.nanmax(track[:, 2]) - start1[2])
        rest = float(abs(end1[2] - start1[2]))
        return {"success": lift > LIFT_M and rest <= REST_M,
                "rule": f"lifted > {LIFT_M} m, final height within {REST_M} m of the start",
                "lift_m": lift, "final_height_change_m": rest}
    if task_kind == "push":
        direction = _direction(task_text)
        step = end1[:2] - start1[:2]
        moved = float(step @ direction if direction is not None else np.linalg.norm(step))
        return {"success": moved >= PUSH_M, "moved_m": moved,
                "rule": f"moved >= {PUSH_M:.3f} m " + ("along the task's direction"
                                                       if direction is not None else "horizontally")}
    base = tracks[2]
    end2 = _final(base)
    end2 = base[0] if end2 is None else end2  # the base object may be hidden under object 1
    xy, dz = float(np.linalg.norm(end1[:2] - end2[:2])), float(end1[2] - end2[2])
    base_moved = float(np.linalg.norm(end2[:2] - base[0, :2]))
    return {"success": xy <= STACK_XY_M and dz >= STACK_Z_M and base_moved <= BASE_MOVED_M,
            "rule": f"object 1 within {STACK_XY_M} m of object 2 horizontally, >= {STACK_Z_M} m "
                    f"above it, object 2 moved <= {BASE_MOVED_M} m",
            "xy_m": xy, "dz_m": dz, "base_moved_m": base_moved}


def episode_labels(pred: Clip, gt: Clip) -> dict:
    """Labels of one evaluated episode: the true success (the dataset's label, else the
    judge on ground truth) and the simulated success (the judge on the prediction)."""
    meta = gt.meta
    kind = meta.get("task_kind", "")
    source = meta.get("source", {}) or {}
    labels = {"task": meta.get("task", ""), "task_kind": kind,
              "scene": str(source.get("scene", source.get("dataset", ""))),
              "policy": str(source.get("policy", "")), "true_success": meta.get("success"),
              "simulated_success": None}
    if gt.object_ids is None or gt.T_cam_from_world is None:
        labels["judge"] = "no object ids: simulated success needs a label from outside"
        return labels
    text = meta.get("task", "")
    on_pred = judge(pred, gt.object_ids[0], kind, gt.T_cam_from_world[0], text)
    on_gt = judge(gt, gt.object_ids[0], kind, gt.T_cam_from_world[0], text)
    labels.update(simulated_success=on_pred["success"], judge=on_pred, judge_on_gt=on_gt,
                  judge_on_gt_success=on_gt["success"])
    if labels["true_success"] is None:
        labels["true_success"] = on_gt["success"]
    return labels


def agreement(true: Sequence[bool], simulated: Sequence[bool]) -> dict:
    """Per-episode agreement of simulated with true success ('positive' = success)."""
    t = np.asarray(true, dtype=bool)
    s = np.asarray(simulated, dtype=bool)
    tp, tn = int(np.sum(t & s)), int(np.sum(~t & ~s))
    fp, fn = int(np.sum(~t & s)), int(np.sum(t & ~s))
    n = len(t)
    return {"episodes": n, "accuracy": (tp + tn) / n if n else None,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
            "success_rate_true": float(t.mean()) if n else None,
            "success_rate_simulated": float(s.mean()) if n else None,
            "success_rate_gap": float(s.mean() - t.mean()) if n else None,
            "confusion": {"tp": tp, "fp": fp, "fn": fn, "tn": tn}}


def rank_correlation(true_rates: Sequence[float], simulated_rates: Sequence[float]) -> float | None:
    """Spearman's rho between true and simulated success rates of several policies."""
    from scipy.stats import spearmanr

    if len(true_rates) < 2 or np.ptp(true_rates) == 0 or np.ptp(simulated_rates) == 0:
        return None  # a constant ranking has no correlation
    rho = spearmanr(true_rates, simulated_rates).statistic
    return None if np.isnan(rho) else float(rho)


def agreement_table(rows: Sequence[Mapping]) -> dict:
    """rows: {policy, task, scene, true_success, simulated_success} (booleans; rows with a
    missing label are counted apart) -> the full agreement section."""
    labelled = [r for r in rows if r.get("true_success") is not None
                and r.get("simulated_success") is not None]
    out = {"rows": len(rows), "unlabelled": len(rows) - len(labelled),
           "agreement": agreement([r["true_success"] for r in labelled],
                                  [r["simulated_success"] for r in labelled])}
    for key, name in (("task", "per_task"), ("scene", "per_scene"), ("policy", "per_policy")):
        groups: dict[str, list] = {}
        for r in labelled:
            groups.setdefault(str(r.get(key, "")), []).append(r)
        out[name] = {g: agreement([r["true_success"] for r in rs],
                                  [r["simulated_success"] for r in rs])
                     for g, rs in sorted(groups.items())}
    policies = out["per_policy"]
    named = {p: v for p, v in policies.items() if p}
    out["spearman"] = rank_correlation([v["success_rate_true"] for v in named.values()],
                                       [v["success_rate_simulated"] for v in named.values()])
    return out


def abstentions(rows: Sequence[Mapping], verdict: str = "simulated_success",
                judge_key: str = "judge") -> dict:
    """Episodes the automatic judge could not decide (verdict None): how many, and why
    (the judge's reason -> count)."""
    reasons: dict[str, int] = {}
    for r in rows:
        if r.get(verdict) is None:
            judged = r.get(judge_key)
            if isinstance(judged, Mapping):
                reason = str(judged.get("rule", "no verdict"))
            else:
                reason = str(judged or "not judged")
            reasons[reason] = reasons.get(reason, 0) + 1
    return {"count": sum(reasons.values()), "episodes": len(rows),
            "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}


def agreement_section(results, baseline=None) -> dict | None:
    """The report's `policy` section from the per-episode labels of evaluated episodes."""
    rows = [dict(r.info.get("policy", {}), episode_id=r.episode_id) for r in results]
    if not rows:
        return None
    section = agreement_table(rows)
    section["episodes"] = [{k: r.get(k) for k in ("episode_id", "task", "task_kind", "scene",
                                                   "policy", "true_success", "simulated_success")}
                           for r in rows]
    checked = [r for r in rows if r.get("true_success") is not None
               and r.get("judge_on_gt_success") is not None]
    # How far the automatic judge is to be trusted: its verdict on the ground truth itself.
    section["judge_on_ground_truth"] = agreement([r["true_success"] for r in checked],
                                                 [r["judge_on_gt_success"] for r in checked])
    section["judge_abstentions"] = {
        "prediction": abstentions(rows),
        "ground_truth": abstentions([r for r in rows if "judge_on_gt" in r],
                                    "judge_on_gt_success", "judge_on_gt")}
    if baseline:
        base = [dict(r.info.get("policy", {})) for r in baseline]
        section["static_world"] = agreement_table(base)["agreement"]
    return section
