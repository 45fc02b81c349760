"""The evaluation workflows behind the CLI: one NPZ pair, or predictions (one `k4d
simulate` directory per episode) against a data engine dataset, with the static-world
floor beside them. Per-episode results are cached under OUT/results/<method>/ so an
interrupted evaluation resumes where it stopped; a cached result counts only for the
settings and the prediction (its summary.json's sha256) it was computed from."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

from k4d.errors import InvalidArgument, NotFound

from k4d_eval import comparison_recording, inputs, plots, policy
from k4d_eval.evaluate import EpisodeResult, Settings, evaluate_clips
from k4d_eval.report import build_report, write_json, write_report

RESULTS_DIR = "results"
STRIPS_DIR = "strips"
MODEL, BASELINE = "model", "static-world"


def settings_key(settings: Settings) -> str:
    """Cached results count only for the settings they were computed with."""
    return hashlib.sha256(json.dumps(settings.to_json(), sort_keys=True).encode()).hexdigest()[:16]


def report_settings(settings: Settings, learned_metrics: Callable | None) -> dict:
    """The report's settings block: what was measured and how, plus (learned metrics given)
    which backbone weights, by file and sha256, produced lpips/fid/fvd/latent_l2."""
    data = settings.to_json()
    describe = getattr(learned_metrics, "describe", None)
    data["learned_metrics"] = describe() if describe is not None else None
    return data


def write_outputs(out: Path, report: dict, strip_clips=None) -> dict[str, Path]:
    """report.json, summary.md, summary.csv, per_frame.png and (given clips) strip.png."""
    paths = write_report(out, report)
    paths["per_frame"] = plots.plot_per_frame(out / plots.PER_FRAME_PNG, report)
    if strip_clips is not None:
        paths["strip"] = plots.strip(out / plots.STRIP_PNG, *strip_clips)
    return paths


# ---- one pair of NPZ files --------------------------------------------------------------
def eval_pair(pred_path: Path, gt_path: Path, out: Path, settings: Settings,
              learned_metrics: Callable | None = None, camera_path: Path | None = None) -> dict:
    """With `camera_path` (the NPZ files hold no camera) OUT/comparison.rrd is written too
    (the caller checks rerun-sdk is installed)."""
    settings.check()
    pred = inputs.load_npz_clip(pred_path)
    gt = inputs.load_npz_clip(gt_path)
    camera = None
    if camera_path is not None:
        camera = comparison_recording.load_camera(camera_path, gt.frames, *gt.size)
    result = evaluate_clips(pred, gt, settings, episode_id=Path(pred_path).stem)
    learned = learned_metrics([pred], [gt]) if learned_metrics else None
    report = build_report([result], report_settings(settings, learned_metrics),
                          method=Path(pred_path).stem,
                          learned=learned, inputs={"pred": str(pred_path), "gt": str(gt_path)})
    write_outputs(Path(out), report, (pred, gt))
    if camera is not None:
        comparison_recording.write_comparison(Path(out) / comparison_recording.COMPARISON_RRD, pred, gt, camera, result,
                                   psnr_max_db=settings.psnr_max_db, method=Path(pred_path).stem)
    return report


# ---- predictions against a dataset ------------------------------------------------------
@dataclass(frozen=True)
class EpisodeJob:
    """Evaluate one episode's prediction directory against the dataset (picklable)."""

    gt_uri: str
    episode_id: str
    pred_dir: str
    method: str
    out: str
    settings: Settings
    record: bool = False  # write OUT/comparison/<episode_id>.rrd (the model's only)

    @property
    def cache(self) -> Path:
        return Path(self.out) / RESULTS_DIR / self.method / f"{self.episode_id}.json"

    @property
    def recording(self) -> Path:
        return Path(self.out) / comparison_recording.COMPARISONS_DIR / f"{self.episode_id}.rrd"

    def prediction_sha256(self) -> str | None:
        """sha256 of the prediction's summary.json (`k4d simulate` writes it last, with its
        model and creation time): a regenerated prediction is a new one."""
        try:
            return hashlib.sha256((Path(self.pred_dir) / inputs.SIM_SUMMARY_JSON).read_bytes()
                                  ).hexdigest()
        except OSError:
            return None


def _cached(job: EpisodeJob) -> EpisodeResult | None:
    try:
        data = json.loads(job.cache.read_text())
    except (OSError, ValueError):
        return None
    if data.get("settings_key") != settings_key(job.settings):
        return None
    if data.get("prediction_sha256") != job.prediction_sha256():
        return None  # the prediction was made again (another model) or replaced
    if job.record and not job.recording.is_file():
        return None  # evaluated before the recording was asked for (or rerun installed)
    return EpisodeResult.from_json(data["result"])


def run_episode(job: EpisodeJob) -> EpisodeResult:
    """Load, evaluate, judge, cache (atomically) and draw this episode's strip."""
    from k4d.episodes import open_dataset

    cached = _cached(job)
    if cached is not None:
        return cached
    dataset = open_dataset(job.gt_uri)
    gt = inputs.load_episode(dataset, job.episode_id)
    pred, condition, _ = inputs.load_sim_dir(job.pred_dir, gt.T_cam_from_world)
    synthetic = gt.meta.get("source", {}).get("kind") == "synthetic" or gt.object_ids is not None
    result = evaluate_clips(pred, gt, job.settings, episode_id=job.episode_id,
                            condition_robot_mask=condition, synthetic=synthetic)
    result.info["policy"] = policy.episode_labels(pred, gt)
    if job.record:  # before the cache: a cached result implies its recording
        comparison_recording.write_comparison(job.recording, pred, gt, gt.camera, result,
                                   psnr_max_db=job.settings.psnr_max_db, method=job.method,
                                   fps=float(gt.meta.get("fps") or 24.0))
    job.cache.parent.mkdir(parents=True, exist_ok=True)
    write_json(job.cache, {"settings_key": settings_key(job.settings),
                           "prediction_sha256": job.prediction_sha256(),
                           "result": result.to_json()})
    strips = Path(job.out) / STRIPS_DIR / job.method
    strips.mkdir(parents=True, exist_ok=True)
    plots.strip(strips / f"{job.episode_id}.png", pred, gt)
    return result


def run_jobs(jobs: Sequence[EpisodeJob], workers: int, progress: bool, desc: str
             ) -> dict[str, EpisodeResult]:
    """Episodes in parallel processes (each loads its own data); a bad episode fails the
    evaluation with its id in the message."""
    from tqdm import tqdm

    results: dict[str, EpisodeResult] = {}
    bar = tqdm(total=len(jobs), desc=desc, unit="episode", disable=not progress)
    try:
        if workers <= 1:
            for job in jobs:
                results[job.episode_id] = _run_named(job)
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(_run_named, job): job for job in jobs}
                for future in as_completed(futures):
                    results[futures[future].episode_id] = future.result()
                    bar.update()
    finally:
        bar.close()
    return results


def _run_named(job: EpisodeJob) -> EpisodeResult:
    try:
        return run_episode(job)
    except InvalidArgument as exc:
        raise InvalidArgument(f"episode {job.episode_id} ({job.method}): {exc}",
                              exc.violations) from None


def resolve_episodes(dataset, requested: Sequence[str] | None) -> list[str]:
    ids = list(dataset.episode_ids)
    if not requested:
        return ids
    unknown = [e for e in requested if e not in set(ids)]
    if unknown:
        raise InvalidArgument.for_field("episodes", f"not in the dataset: {unknown}")
    return list(requested)


def local_predictions(uri: str, episode_ids: Sequence[str], scratch: Path) -> Path:
    """A local directory holding `<episode_id>/` simulate outputs: the directory itself,
    or for s3:// a copy of just the files the evaluator reads."""
    if "://" not in uri or uri.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(uri).path)) if uri.startswith("file://") else Path(uri)
    from k4d.episodes.location import open_location

    loc = open_location(uri)
    for episode_id in episode_ids:
        for name in (inputs.SIM_POINTMAP_NPZ, inputs.SIM_ROBOT_NPZ, inputs.SIM_SUMMARY_JSON):
            data = loc.read_bytes(f"{episode_id}/{name}")
            if data is not None:
                (scratch / episode_id).mkdir(parents=True, exist_ok=True)
                (scratch / episode_id / name).write_bytes(data)
    return scratch


def require_predictions(root: Path, ids: Sequence[str], name: str, uri: str) -> None:
    missing = [e for e in ids if not inputs.is_sim_dir(root / e)]
    if missing:
        raise NotFound(f"{name} predictions: no `k4d simulate` output for episode(s) "
                       f"{missing[:5]}{' ...' if len(missing) > 5 else ''} under {uri}")


def check_local_predictions(pred_uri: str, gt_uri: str, episodes: Sequence[str] | None) -> None:
    """Fail before any generation when local predictions are missing (s3:// ones are
    checked once fetched)."""
    from k4d.episodes import open_dataset

    if pred_uri.startswith("s3://"):
        return
    ids = resolve_episodes(open_dataset(gt_uri), episodes)
    require_predictions(local_predictions(pred_uri, ids, Path()), ids, MODEL, pred_uri)


def eval_dataset(pred_uri: str, gt_uri: str, out: Path, settings: Settings, *,
                 baseline_uri: str | None = None, episodes: Sequence[str] | None = None,
                 workers: int = 1, progress: bool = True, method: str = "model",
                 learned_metrics: Callable | None = None, extra_inputs: dict | None = None,
                 record: bool = False) -> dict:
    """`k4d eval --pred --gt`: every requested episode must have a prediction directory.
    record: also write OUT/comparison/<episode_id>.rrd per episode (ground truth beside the
    model's prediction; the caller checks rerun-sdk is installed)."""
    from k4d.episodes import open_dataset

    settings.check()
    dataset = open_dataset(gt_uri)
    ids = resolve_episodes(dataset, episodes)
    if not ids:
        raise InvalidArgument.for_field("gt", f"{gt_uri} holds no episode")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="k4d-eval-") as scratch:
        roots = {MODEL: local_predictions(pred_uri, ids, Path(scratch) / MODEL)}
        if baseline_uri:
            roots[BASELINE] = local_predictions(baseline_uri, ids, Path(scratch) / BASELINE)
        for name, root in roots.items():
            require_predictions(root, ids, name, pred_uri if name == MODEL else baseline_uri)
        if workers > 1:  # episodes in processes: share the cores instead of oversubscribing
            settings = replace(settings, threads=max(1, (os.cpu_count() or 1) // workers))
        results = {}
        for name, root in roots.items():
            jobs = [EpisodeJob(gt_uri, e, str(root / e), name, str(out), settings,
                               record=record and name == MODEL) for e in ids]
            by_id = run_jobs(jobs, workers, progress, f"eval {name}")
            results[name] = [by_id[e] for e in ids]
        learned = base_learned = None
        if learned_metrics is not None:
            learned, base_learned = _learned_over(learned_metrics, dataset, ids, roots)
    report = build_report(
        results[MODEL], report_settings(settings, learned_metrics), method=method,
        baseline=results.get(BASELINE),
        learned=learned, baseline_learned=base_learned,
        policy=policy.agreement_section(results[MODEL], results.get(BASELINE)),
        inputs={"pred": pred_uri, "gt": gt_uri, "baseline": baseline_uri, "episodes": ids,
                **(extra_inputs or {})})
    paths = write_outputs(out, report)
    first = out / STRIPS_DIR / MODEL / f"{ids[0]}.png"
    if first.is_file():
        shutil.copyfile(first, out / plots.STRIP_PNG)
        paths["strip"] = out / plots.STRIP_PNG
    return report


def _learned_over(learned_metrics: Callable, dataset, ids, roots) -> tuple:
    """LPIPS/FID/FVD/latent L2 need every clip at once (FID and FVD are distribution
    metrics); computed in this process after the per-episode work, on RGB only."""
    import numpy as np

    from k4d_eval.clip import Clip

    def rgb_of(path: Path):
        with np.load(path, allow_pickle=False) as npz:
            return npz["rgb"]

    gts = [Clip(rgb=dataset.open(e).read("rgb")) for e in ids]
    out = []
    for name in (MODEL, BASELINE):
        if name not in roots:
            out.append(None)
            continue
        preds = [Clip(rgb=rgb_of(roots[name] / e / inputs.SIM_POINTMAP_NPZ)) for e in ids]
        out.append(learned_metrics(preds, gts))
    return tuple(out)
