"""Aggregate episode results into the report people and tools read:
DIR/report.json, summary.md and summary.csv (the paper's table layout)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from k4d_eval import metric_registry
from k4d_eval.evaluate import EpisodeResult, metric_values
from k4d_eval.stats import FrameStats, frame_mean

REPORT_JSON = "report.json"
SUMMARY_MD = "summary.md"
SUMMARY_CSV = "summary.csv"
HEADLINE = ("psnr", "ssim", "chamfer_l1", "chamfer_l2", "fscore")
LEARNED = ("lpips", "fid", "fvd", "latent_l2")
# REFERENCE.md section 4 (paper, test = 2% of Robo4D-200k; geometry in its normalisation).
PAPER_ROWS = {
    "Kinema4D (paper)": {"psnr": 22.50, "ssim": 0.864, "latent_l2": 0.1380, "fid": 25.2,
                         "fvd": 98.5, "lpips": 0.105, "chamfer_l1_k4d": 0.0479,
                         "chamfer_l2_k4d": 0.0077, "fscore_k4d": 0.4733},
    "TesserAct (paper)": {"psnr": 19.35, "ssim": 0.766, "latent_l2": 0.1911, "fid": 29.5,
                          "fvd": 120.3, "lpips": 0.158, "chamfer_l1_k4d": 0.0836,
                          "chamfer_l2_k4d": 0.0130, "fscore_k4d": 0.2896},
}
VIDEO_COLUMNS = (("PSNR", "psnr"), ("SSIM", "ssim"), ("latent L2", "latent_l2"), ("FID", "fid"),
                 ("FVD", "fvd"), ("LPIPS", "lpips"))
GEOMETRY_COLUMNS = (("CD-L1", "chamfer_l1{s}"), ("CD-L2", "chamfer_l2{s}"), ("F-score", "fscore{s}"),
                    ("temporal CD-L1", "temporal_chamfer_l1{s}"), ("AbsRel", "depth_absrel{s}"),
                    ("delta<1.25", "depth_delta1{s}"))


def merge(results: Iterable[EpisodeResult], first: int = 0) -> dict[str, dict[str, FrameStats]]:
    """region -> group -> stats of every frame (from `first` on) of every episode
    (reduction: cat)."""
    merged: dict[str, dict[str, FrameStats]] = {}
    for result in results:
        for region, groups in result.stats.items():
            for group, stats in groups.items():
                if first:
                    stats = FrameStats({k: v[first:] for k, v in stats.arrays.items()})
                slot = merged.setdefault(region, {})
                slot[group] = slot[group].cat(stats) if group in slot else stats
    return merged


def _per_frame_mean(results: list[EpisodeResult], region: str, psnr_max_db: float
                    ) -> dict[str, list[float | None]]:
    """metric -> value per frame index, the mean over episodes having that frame."""
    rows: dict[str, list[np.ndarray]] = {}
    for result in results:
        if region in result.stats:
            for name, values in metric_values(result.stats[region], psnr_max_db).items():
                rows.setdefault(name, []).append(values)
    out = {}
    for name, series in rows.items():
        frames = max(len(s) for s in series)
        table = np.full((len(series), frames), np.nan)
        for i, s in enumerate(series):
            table[i, :len(s)] = s
        out[name] = [frame_mean(table[:, t]) for t in range(frames)]
    return out


def first_frame(results: list[EpisodeResult], psnr_max_db: float) -> dict:
    """Frame 0 against the ground truth's frame 0, which is the image the model was given:
    whole-frame PSNR, mean and worst over episodes (a model should give it back)."""
    values = [metric_values(r.stats["whole"], psnr_max_db)["psnr"][0] for r in results
              if "whole" in r.stats and "psnr" in r.stats["whole"] and r.frames > 0]
    values = [float(v) for v in values if np.isfinite(v)]
    return {"psnr_mean": float(np.mean(values)) if values else None,
            "psnr_min": float(np.min(values)) if values else None, "episodes": len(values)}


def section(results: list[EpisodeResult], psnr_max_db: float) -> dict:
    """metrics (whole frame), regions, per_frame and episodes of one method."""
    merged = merge(results)
    # The headline keys are always there (null when not measurable, e.g. no ground-truth
    # geometry): tools read them by name.
    regions = {region: {**dict.fromkeys(HEADLINE),
                        **{name: frame_mean(v) for name, v in metric_values(groups, psnr_max_db).items()}}
               for region, groups in merged.items()}
    # Frame 0 is the given image: a model that returns it scores psnr_max_db there, which
    # lifts every all-frame mean. The generated frames alone say what the model predicted.
    generated = {region: {name: frame_mean(v) for name, v in
                          metric_values(groups, psnr_max_db).items()}
                 for region, groups in merge(results, first=1).items()}
    return {
        "metrics": dict(regions.get("whole", {})),
        "first_frame": first_frame(results, psnr_max_db),
        "regions": regions,
        "regions_generated": generated,
        "per_frame": _per_frame_mean(results, "whole", psnr_max_db),
        "per_frame_regions": {r: _per_frame_mean(results, r, psnr_max_db)
                              for r in merged if r != "whole"},
        "episodes": [{"episode_id": r.episode_id, "frames": r.frames, "info": r.info,
                      "metrics": {n: frame_mean(v) for n, v in
                                  metric_values(r.stats.get("whole", {}), psnr_max_db).items()}}
                     for r in results],
    }


def build_report(results: list[EpisodeResult], settings: Mapping, *, method: str = "model",
                 baseline: list[EpisodeResult] | None = None, learned: Mapping | None = None,
                 baseline_learned: Mapping | None = None, policy: Mapping | None = None,
                 inputs: Mapping | None = None) -> dict:
    psnr_max = float(settings.get("psnr_max_db", 100.0))
    report = {"method": method, **section(results, psnr_max)}
    if learned:
        report["metrics"].update(learned)
    report["baseline"] = None
    if baseline:
        base = section(baseline, psnr_max)
        if baseline_learned:
            base["metrics"].update(baseline_learned)
        report["baseline"] = {"method": "static-world", **base}
    report["policy"] = dict(policy) if policy else None
    report["counts"] = {"episodes": len(results), "frames": int(sum(r.frames for r in results))}
    report["settings"] = dict(settings)
    report["inputs"] = dict(inputs or {})
    report["reference"] = {"source": "Kinema4D paper (REFERENCE.md section 4); geometry in the "
                                     "Kinema4D normalisation (our *_k4d keys)", "rows": PAPER_ROWS}
    return report


def goal_figures(report: Mapping) -> dict:
    """Issue 21's goal figures of a report, each beside the static-world floor's: what the
    model card, the shipped model's manifest (`heldout`) and the ablations read. Region
    figures are over the generated frames (t >= 1; frame 0 is the given image and has its
    own figure), `*_all_frames` over every frame."""
    floor = report.get("baseline") or {}

    def region(sec, name, key, frames="regions_generated"):
        regions = sec.get(frames) or sec.get("regions") or {}
        value = (regions.get(name) or {}).get(key)
        return None if value is None else round(float(value), 4)

    policy = report.get("policy") or {}
    abstained = (policy.get("judge_abstentions") or {}).get("prediction") or {}
    first = report.get("first_frame") or {}
    return {
        "episodes": report["counts"]["episodes"],
        "frames": "generated frames t >= 1 (frame 0: frame0_psnr_min)",
        "given": (report.get("inputs") or {}).get("given", "first frame RGB"),
        "frame0_psnr_min": first.get("psnr_min"),
        "frame0_psnr_mean": first.get("psnr_mean"),
        "static_psnr": region(report, "static", "psnr"),
        "static_psnr_floor": region(floor, "static", "psnr"),
        "changed_mse": region(report, "changed", "mse"),
        "changed_mse_floor": region(floor, "changed", "mse"),
        "changed_cd_l1_m": region(report, "changed", "chamfer_l1"),
        "changed_cd_l1_m_floor": region(floor, "changed", "chamfer_l1"),
        "robot_psnr": region(report, "robot", "psnr"),
        "robot_psnr_floor": region(floor, "robot", "psnr"),
        "environment_psnr": region(report, "environment", "psnr"),
        "whole_psnr": region(report, "whole", "psnr"),
        "depth_absrel": region(report, "whole", "depth_absrel"),
        "depth_absrel_floor": region(floor, "whole", "depth_absrel"),
        "objects_depth_absrel": region(report, "objects", "depth_absrel"),
        "objects_depth_absrel_floor": region(floor, "objects", "depth_absrel"),
        "objects_mse": region(report, "objects", "mse"),
        "objects_mse_floor": region(floor, "objects", "mse"),
        "objects_point_l1_m": region(report, "objects", "point_l1"),
        "objects_point_l1_m_floor": region(floor, "objects", "point_l1"),
        **{f"objects_{part}_mse{side}": region(sec, f"objects_{part}", "mse")
           for part in ("arrived", "left", "stayed")
           for side, sec in (("", report), ("_floor", floor))},
        "static_psnr_all_frames": region(report, "static", "psnr", "regions"),
        "robot_psnr_all_frames": region(report, "robot", "psnr", "regions"),
        "success_agreement": (policy.get("agreement") or {}).get("accuracy"),
        "judge_abstained": abstained.get("count", 0),
    }


def _finite(value):
    """JSON without NaN/Infinity: non-finite numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        return _finite(value.item())
    return value


def _atomic_text(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json(path: Path, data) -> Path:
    return _atomic_text(Path(path), json.dumps(_finite(data), indent=1, allow_nan=False) + "\n")


def _fmt(value, key: str) -> str:
    return "-" if value is None else format(value, metric_registry.info(key).fmt)


def _rows(report: Mapping) -> list[tuple[str, Mapping]]:
    rows = [(report.get("method", "model"), report["metrics"])]
    if report.get("baseline"):
        rows.append(("static-world (floor)", report["baseline"]["metrics"]))
    return rows


def _table(title: str, columns, rows, suffix: str = "", first: str = "method") -> list[str]:
    keys = [(label, key.format(s=suffix)) for label, key in columns]
    lines = [f"### {title}", "", f"| {first} | " + " | ".join(label for label, _ in keys) + " |",
             "|---" * (len(keys) + 1) + "|"]
    for name, metrics in rows:
        lines.append(f"| {name} | " + " | ".join(_fmt(metrics.get(k), k) for _, k in keys) + " |")
    return lines + [""]


def summary_markdown(report: Mapping) -> str:
    rows = _rows(report)
    paper = list(PAPER_ROWS.items())
    counts = report["counts"]
    settings = report["settings"]
    pixels = settings.get("geometry_pixels")
    sampled = ("every valid pixel" if not pixels else
               f"{pixels} sampled pixels per frame (seed {settings.get('seed')})")
    lines = [f"# Evaluation: {report.get('method', 'model')}", "",
             f"{counts['episodes']} episode(s), {counts['frames']} frames. Per frame, then the "
             f"mean. Geometry on {sampled}, F-score at tau = {settings.get('tau')}: compare "
             "Chamfer and F-score only with runs at the same sampling, image size and tau.", ""]
    lines += _table("Video (paper Table 1 layout)", VIDEO_COLUMNS, rows + paper)
    lines += _table("Geometry, Kinema4D normalisation (comparable with the paper)",
                    GEOMETRY_COLUMNS, rows + paper, "_k4d")
    lines += _table("Geometry, metres", GEOMETRY_COLUMNS, rows, "")
    region_cols = (("PSNR", "psnr"), ("MSE", "mse"), ("SSIM", "ssim"), ("CD-L1 m", "chamfer_l1"),
                   ("CD-L2 m", "chamfer_l2"), ("F-score m", "fscore"),
                   ("CD-L1 k4d", "chamfer_l1_k4d"), ("AbsRel", "depth_absrel"))
    for name, sec in [(report.get("method", "model"), report)] + (
            [("static-world", report["baseline"])] if report.get("baseline") else []):
        region_rows = [(region, values) for region, values in sec["regions"].items()]
        lines += _table(f"Regions: {name}", region_cols, region_rows, first="region")
        generated_rows = [(region, values) for region, values in
                          (sec.get("regions_generated") or {}).items()]
        if generated_rows:
            lines += _table(f"Regions, generated frames only (t >= 1): {name}", region_cols,
                            generated_rows, first="region")
        first = sec.get("first_frame") or {}
        if first.get("psnr_mean") is not None:
            lines += [f"Frame 0 (the given image) against the input: PSNR {first['psnr_mean']:.2f}"
                      f" dB mean, {first['psnr_min']:.2f} dB worst, over {first['episodes']} "
                      "episode(s).", ""]
    if report.get("policy"):
        policy = report["policy"]
        lines += ["### Policy evaluation agreement", ""]
        agreement = policy.get("agreement") or {}
        for key in ("episodes", "accuracy", "precision", "recall", "success_rate_true",
                    "success_rate_simulated", "success_rate_gap"):
            value = agreement.get(key)
            text = "-" if value is None else (f"{value:.4f}" if isinstance(value, float) else value)
            lines.append(f"- {key.replace('_', ' ')}: {text}")
        judge = policy.get("judge_on_ground_truth") or {}
        if judge.get("episodes"):
            lines.append(f"- judge on ground truth vs labels: accuracy {judge['accuracy']:.4f} "
                         f"over {judge['episodes']} episode(s)")
        lines += _abstention_lines(policy.get("judge_abstentions") or {})
        if policy.get("spearman") is not None:
            lines.append(f"- Spearman rho of policies (simulated vs true success rate): "
                         f"{policy['spearman']:.4f}")
        lines.append("")
    return "\n".join(lines)


def _abstention_lines(abstained: Mapping) -> list[str]:
    """One line per side the automatic judge abstained on: count and reasons."""
    lines = []
    for side, label in (("prediction", "predictions"), ("ground_truth", "ground truth")):
        a = abstained.get(side) or {}
        if a.get("count"):
            reasons = "; ".join(f"{reason} ({n})" for reason, n in a["reasons"].items())
            lines.append(f"- judge abstained on {a['count']} of {a['episodes']} episode(s) "
                         f"({label}), not counted above: {reasons}")
    return lines


def summary_csv(report: Mapping) -> str:
    columns = [key for _, key in VIDEO_COLUMNS] + [
        key.format(s=s) for s in ("_k4d", "") for _, key in GEOMETRY_COLUMNS]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["method"] + columns)
    for name, metrics in _rows(report) + list(PAPER_ROWS.items()):
        writer.writerow([name] + ["" if metrics.get(c) is None else f"{metrics[c]:.6g}"
                                  for c in columns])
    return buf.getvalue()


def write_report(out_dir: Path, report: Mapping) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return {"report": write_json(out_dir / REPORT_JSON, report),
            "summary_md": _atomic_text(out_dir / SUMMARY_MD, summary_markdown(_finite(report))),
            "summary_csv": _atomic_text(out_dir / SUMMARY_CSV, summary_csv(_finite(report)))}
