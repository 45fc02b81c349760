"""The policy-eval report from the episode records: `report.json` and `summary.md` (with
the scatter plot and side-by-side Rerun recordings of selected rollouts).

Success rates are over the episodes evaluated in BOTH worlds (status ok in each). Truth is
physics; positive is success. A world-model episode whose judge cannot find the object
(verdict None) counts as not successful there, and is counted in `judge_abstentions`.
Malformed action chunks and unreachable policy servers are listed, never counted.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence

import numpy as np

from k4d_policy.evaluate import EvalConfig, episode_keys, episode_name, open_output, read_record


def _finite(x) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def correlations(physics: Sequence[float], world_model: Sequence[float]) -> dict:
    """Pearson and Spearman (scipy) and MMRV over cells; None where undefined (fewer than
    two cells, or a constant side)."""
    from scipy.stats import pearsonr, spearmanr

    r, s = np.asarray(physics, float), np.asarray(world_model, float)
    defined = len(r) >= 2 and np.ptp(r) > 0 and np.ptp(s) > 0
    return {"pearson": _finite(pearsonr(r, s).statistic) if defined else None,
            "spearman": _finite(spearmanr(r, s).statistic) if defined else None,
            "mmrv": mmrv(r, s) if len(r) >= 2 else None, "cells": len(r)}


def mmrv(real: Sequence[float], simulated: Sequence[float]) -> float:
    """Mean maximum rank violation (SIMPLER): the mean over i of the largest |r_i - r_j|
    among the j that the simulation orders the other way round from reality."""
    r, s = np.asarray(real, float), np.asarray(simulated, float)
    violation = np.sign(s[:, None] - s[None, :]) != np.sign(r[:, None] - r[None, :])
    gaps = np.abs(r[:, None] - r[None, :]) * violation
    return float(gaps.max(axis=1).mean()) if len(r) else 0.0


def confusion(pairs: Sequence[tuple[bool, bool]]) -> dict:
    """(physics, world model) successes -> tp/fp/fn/tn with physics as truth."""
    tp = sum(p and w for p, w in pairs)
    fn = sum(p and not w for p, w in pairs)
    fp = sum(w and not p for p, w in pairs)
    tn = sum(not p and not w for p, w in pairs)
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "rows": "physics (truth)", "columns": "world model", "positive": "success"}


def build_report(cfg: EvalConfig, records: list[dict]) -> dict:
    cells: dict[tuple[str, str], list] = {}
    malformed, not_evaluated, abstentions, pairs_all = [], [], 0, []
    per_task_pairs: dict[str, list] = {}
    for rec in records:
        cell = cells.setdefault((rec["policy"], rec["task"]), [])
        worlds = {w: rec.get(w, {}) for w in ("physics", "world_model")}
        for w, r in worlds.items():
            if r.get("status") == "malformed":
                malformed.append(f"{r.get('error')} ({w}, {rec['episode']})")
            elif r.get("status") in ("not_evaluated", "error"):
                not_evaluated.append({"policy": rec["policy"], "task": rec["task"], "index": rec["index"],
                                      "world": w, "status": r.get("status"), "error": r.get("error", "")})
        if all(r.get("status") == "ok" for r in worlds.values()):
            wm = worlds["world_model"].get("success")
            abstentions += wm is None
            pair = (bool(worlds["physics"].get("success")), bool(wm))
            cell.append(pair)
            pairs_all.append(pair)
            per_task_pairs.setdefault(rec["task"], []).append(pair)
    rows = []
    for (policy, task), pairs in sorted(cells.items(), key=lambda kv: (cfg.policies.index(kv[0][0])
                                                                       if kv[0][0] in cfg.policies else 99,
                                                                       kv[0][1])):
        n = len(pairs)
        rows.append({"policy": policy, "task": task, "n": n,
                     "world_model_success": float(np.mean([w for _, w in pairs])) if n else None,
                     "physics_success": float(np.mean([p for p, _ in pairs])) if n else None})
    judged = [r for r in rows if r["n"]]
    corr = correlations([r["physics_success"] for r in judged], [r["world_model_success"] for r in judged])
    per_task = {}
    for task, pairs in sorted(per_task_pairs.items()):
        cells_t = [r for r in judged if r["task"] == task]
        per_task[task] = {"episodes": len(pairs),
                          "episode_agreement": float(np.mean([p == w for p, w in pairs])) if pairs else None,
                          "physics_success": float(np.mean([p for p, _ in pairs])),
                          "world_model_success": float(np.mean([w for _, w in pairs])),
                          "correlation": correlations([r["physics_success"] for r in cells_t],
                                                      [r["world_model_success"] for r in cells_t]),
                          "confusion": confusion(pairs),
                          "world_model_judge_when_physics_succeeded": _judge_measures(
                              [r for r in records if r["task"] == task and r.get("physics", {}).get("success")
                               and r.get("world_model", {}).get("status") == "ok"])}
    corr_all = {k: corr[k] for k in ("pearson", "spearman", "mmrv")}
    agreement_all = float(np.mean([p == w for p, w in pairs_all])) if pairs_all else None
    return {
        "goals": goals({**corr_all, "episode_agreement": agreement_all}),
        "policies": rows,
        "correlation": corr_all,
        "episode_agreement": agreement_all,
        "confusion": confusion(pairs_all),
        "per_task": per_task,
        "episodes": {"planned": len(episode_keys(cfg)), "recorded": len(records),
                     "evaluated_in_both_worlds": len(pairs_all), "judge_abstentions": abstentions},
        "malformed_actions": malformed,
        "not_evaluated": not_evaluated,
        "settings": {"policies": cfg.policies, "tasks": cfg.tasks, "scenes": cfg.scenes, "seed": cfg.seed,
                     "framing": cfg.framing,
                     "mode": cfg.mode, "chunk": cfg.chunk, "model": cfg.model_name, "model_config_sha256": cfg.model_digest,
                     "clip": list(cfg.clip),
                     "dt_s": cfg.dt_s, "horizon": cfg.horizon, "robot": cfg.robot},
        "timing": _timing(records),
    }


GOALS = {"pearson": (">=", 0.9), "spearman": (">=", 0.9), "mmrv": ("<=", 0.05), "episode_agreement": (">=", 0.85)}


def goals(values: dict) -> dict:
    """Each agreement goal (issue 18) with the value, whether it is met and by how much it
    is missed (None where the value is undefined)."""
    out = {}
    for name, (op, target) in GOALS.items():
        v = values.get(name)
        met = None if v is None else (v >= target if op == ">=" else v <= target)
        out[name] = {"goal": f"{op} {target}", "value": v, "met": met,
                     "missed_by": None if v is None or met else round(abs(target - v), 4)}
    return out


def _judge_measures(records: list[dict]) -> dict:
    """Medians of the world-model judge's measured values (lift, moved, xy, ...) over the
    episodes physics judged successful: what the world model showed where it should have
    shown success. `abstained`: episodes where the judge could not find the object."""
    values: dict[str, list] = {}
    abstained = 0
    for r in records:
        judged = r["world_model"].get("judge", {})
        abstained += judged.get("success") is None
        for k, v in judged.items():
            if isinstance(v, float) and k != "success":
                values.setdefault(k, []).append(v)
    return {"episodes": len(records), "abstained": abstained,
            **{f"median_{k}": round(float(np.median(v)), 4) for k, v in sorted(values.items())}}


def _timing(records: list[dict]) -> dict:
    out = {}
    for w in ("physics", "world_model"):
        secs = [r[w]["seconds"] for r in records if isinstance(r.get(w), dict) and "seconds" in r[w]]
        out[f"{w}_seconds_per_episode"] = round(float(np.mean(secs)), 3) if secs else None
        out[f"{w}_seconds_total"] = round(float(np.sum(secs)), 1) if secs else None
    return out


def collect(cfg: EvalConfig) -> list[dict]:
    store = open_output(cfg.out)
    fingerprint = cfg.fingerprint()
    out = []
    for key in episode_keys(cfg):
        rec = read_record(store, episode_name(*key))
        if rec is not None and rec.get("fingerprint") == fingerprint:
            out.append(rec)
    return out


def scatter_png(report: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 5.2), dpi=110)
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="y = x")
    markers = {"pick": "o", "push": "s", "stack": "^"}
    colours = {"pick": "C0", "push": "C1", "stack": "C2"}
    for row in report["policies"]:
        if not row["n"]:
            continue
        x, y = row["physics_success"], row["world_model_success"]
        ax.scatter([x], [y], marker=markers.get(row["task"], "D"), s=46, label=row["task"],
                   color=colours.get(row["task"], "C3"), alpha=0.75)
        ax.annotate(row["policy"], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="upper left", fontsize=8)
    c = report["correlation"]
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    ax.set_title(f"success per policy x task: Pearson {fmt(c['pearson'])}, Spearman {fmt(c['spearman'])}, "
                 f"MMRV {fmt(c['mmrv'])}", fontsize=8)
    ax.set_xlabel("physics (MuJoCo) success rate")
    ax.set_ylabel("world-model success rate")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def select_rollouts(records: list[dict], per_task: int = 2) -> list[dict]:
    """Per task: a disagreement first (when there is one), then an agreement on success."""
    chosen = []
    for task in sorted({r["task"] for r in records}):
        ok = [r for r in records if r["task"] == task and all(r.get(w, {}).get("status") == "ok"
                                                              for w in ("physics", "world_model"))]
        disagree = [r for r in ok if bool(r["physics"]["success"]) != bool(r["world_model"]["success"])]
        agree = [r for r in ok if r["physics"]["success"] and r["world_model"]["success"]]
        chosen.extend((disagree[:1] + agree[:1] + ok)[:per_task] if ok else [])
    seen, out = set(), []
    for r in chosen:
        if r["episode"] not in seen:
            seen.add(r["episode"])
            out.append(r)
    return out


def write_recordings(cfg: EvalConfig, records: list[dict], store) -> tuple[list[str], str]:
    """Side-by-side recordings (physics | world model) of selected rollouts -> (keys, note)."""
    import importlib.util
    import tempfile
    from pathlib import Path

    if importlib.util.find_spec("rerun") is None:
        return [], "rerun-sdk is not installed (pip install 'k4d-policy[viz]'): no recordings written"
    from k4d.recording.writer import write_comparison_recording

    from k4d_policy.scenes import scenario

    keys = []
    for rec in select_rollouts(records):
        name = rec["episode"]
        if not store.exists(f"clips/{name}.npz"):
            continue
        clips = np.load(io.BytesIO(store.get_bytes(f"clips/{name}.npz")))
        if "physics_rgb" not in clips or "world_model_rgb" not in clips:
            continue
        sc = scenario(cfg.seed, rec["index"], rec["task"], cfg.clip[1], cfg.clip[2], cfg.robot,
                      framing=cfg.framing)
        info = {"task": rec.get("text", ""), "policy": rec["policy"],
                "physics": f"success={rec['physics']['success']}: {rec['physics'].get('judge', {}).get('rule', '')}",
                "world model": f"success={rec['world_model']['success']}"}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.rrd"
            write_comparison_recording(
                path, ground_truth={"rgb": clips["physics_rgb"]}, prediction={"rgb": clips["world_model_rgb"]},
                camera=sc.scene.camera.camera(), joints=clips["physics_joints"], fps=1.0 / cfg.dt_s,
                title=f"policy-eval {name}: physics (left) vs world model (right)", info=info)
            key = f"recordings/{name}.rrd"
            store.put_file(key, path)
            keys.append(key)
    return keys, ""


def summary_markdown(report: dict, recordings: list[str], note: str) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    c, e = report["correlation"], report["episodes"]
    lines = ["# k4d policy-eval", "",
             f"Model `{report['settings']['model']}`, mode {report['settings']['mode']}, chunk "
             f"{report['settings']['chunk']} frames, clip {report['settings']['clip']}, seed "
             f"{report['settings']['seed']}, {report['settings']['scenes']} scenes per task; "
             f"{e['evaluated_in_both_worlds']} of {e['planned']} episodes evaluated in both worlds.", "",
             f"**Pearson {fmt(c['pearson'])}, Spearman {fmt(c['spearman'])}, MMRV {fmt(c['mmrv'])}, "
             f"episode agreement {fmt(report['episode_agreement'])}** (goals: >= 0.9, >= 0.9, <= 0.05, >= 0.85)",
             "", "Goals: " + "; ".join(
                 f"{name} {g['goal']}: " + ("undefined (under two cells, or one side constant)" if g["value"] is None else
                                            "met" if g["met"] else f"missed by {g['missed_by']:.3f}")
                 for name, g in report["goals"].items()) + ".",
             "", "![world-model vs physics success per policy x task](scatter.png)", "",
             "| policy | task | n | physics success | world-model success |", "|---|---|---|---|---|"]
    for r in report["policies"]:
        lines.append(f"| {r['policy']} | {r['task']} | {r['n']} | {fmt(r['physics_success'])} | "
                     f"{fmt(r['world_model_success'])} |")
    k = report["confusion"]
    lines += ["", "Episode-level confusion (truth = physics, positive = success): "
              f"TP {k['tp']}, FP {k['fp']}, FN {k['fn']}, TN {k['tn']}; world-model judge abstentions "
              f"{e['judge_abstentions']}.", "", "| task | episodes | agreement | physics | world model | Pearson | Spearman | MMRV |",
              "|---|---|---|---|---|---|---|---|"]
    for task, t in report["per_task"].items():
        tc = t["correlation"]
        lines.append(f"| {task} | {t['episodes']} | {fmt(t['episode_agreement'])} | {fmt(t['physics_success'])} | "
                     f"{fmt(t['world_model_success'])} | {fmt(tc['pearson'])} | {fmt(tc['spearman'])} | "
                     f"{fmt(tc['mmrv'])} |")
    lines += ["", "What the world-model judge measured where physics succeeded (medians):", ""]
    for task, t in report["per_task"].items():
        m = t["world_model_judge_when_physics_succeeded"]
        measured = ", ".join(f"{k[len('median_'):]} {v}" for k, v in m.items() if k.startswith("median_"))
        lines.append(f"- {task}: {m['episodes']} episodes, {m['abstained']} abstentions; {measured or 'nothing'}")
    lines += ["", "## Rollouts side by side (Rerun: `rerun FILE.rrd`; left physics, right world model)", ""]
    lines += [f"- [{key}]({key})" for key in recordings] or [f"- {note or 'none selected'}"]
    if report["malformed_actions"]:
        lines += ["", "## Malformed action chunks", ""] + [f"- {m}" for m in report["malformed_actions"]]
    if report["not_evaluated"]:
        lines += ["", "## Not evaluated", ""] + [
            f"- {n['policy']} {n['task']} scene {n['index']} ({n['world']}): {n['error']}"
            for n in report["not_evaluated"]]
    return "\n".join(lines) + "\n"


def write_report(cfg: EvalConfig, recordings: bool = True) -> dict:
    store = open_output(cfg.out)
    records = collect(cfg)
    report = build_report(cfg, records)
    keys, note = write_recordings(cfg, records, store) if recordings else ([], "recordings disabled")
    report["recordings"] = keys
    if note:
        report["recordings_note"] = note
    store.put_bytes("report.json", (json.dumps(report, indent=1) + "\n").encode(), "application/json")
    store.put_bytes("scatter.png", scatter_png(report), "image/png")
    store.put_bytes("summary.md", summary_markdown(report, keys, note).encode(), "text/markdown")
    return report
