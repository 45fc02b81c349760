"""Policy-evaluation agreement: does the world model judge rollouts the way reality does?

- An automatic success judge for the data engine's synthetic tasks (its pure core lives in
  the runtime, `k4d_tabletop.judge`, shared with `k4d policy-eval`): it finds the target
  object in a clip by its colour in frame 0 (its pixels there come from ground truth
  object_ids, what the initial scene shows), reads the object's 3D position from the
  clip's pointmap in that region frame by frame (median of its points, in the world frame
  of the camera JSON) and applies the data engine's rules (k4d_tabletop.tasks.judge) as far
  as pointmaps show them:
    pick   lifted > LIFT_M at some frame and resting again at the end (final height within
           REST_M of the start); where the episode's metadata gives the task's goal
           (`source.goal_xy`, which k4d datagen writes), also ending within 4 cm of the
           marker, as the data engine's judge requires (k4d_tabletop.judge's goal_xy)
    push   moved >= PUSH_M along the direction named in the task text (left, right,
           forward, back), else horizontally; with `source.goal_xy`, also ending within
           5 cm of the goal
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
from k4d_tabletop.judge import judge, start_positions

from k4d_eval.clip import Clip


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
    # the episode's initial scene: the judge reads each object's displacement from it
    starts = None if gt.object_poses is None else start_positions(gt.object_poses[0])
    goal = _goal_xy(source)
    on_pred = judge(pred, gt.object_ids[0], kind, gt.T_cam_from_world[0], text, goal_xy=goal,
                    start_xyz=starts)
    on_gt = judge(gt, gt.object_ids[0], kind, gt.T_cam_from_world[0], text, goal_xy=goal,
                  start_xyz=starts)
    labels.update(simulated_success=on_pred["success"], judge=on_pred, judge_on_gt=on_gt,
                  judge_on_gt_success=on_gt["success"])
    if labels["true_success"] is None:
        labels["true_success"] = on_gt["success"]
    return labels


def _goal_xy(source: Mapping) -> np.ndarray | None:
    """The task's goal (world x, y) from an episode's `source` metadata; None when it has
    none (episodes written before k4d datagen stored it, imports)."""
    goal = source.get("goal_xy")
    if goal is None:
        return None
    goal = np.asarray(goal, np.float64).reshape(-1)
    return goal if goal.shape == (2,) and np.isfinite(goal).all() else None


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
