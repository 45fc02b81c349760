"""The metric registry (k4d_eval.metric_registry): every name a report carries is a
registry entry with `higher_is_better`, the directions are right, and the evaluator keeps
exactly the statistics each metric declares."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_eval import learned, metric_registry
from k4d_eval.clip import Clip
from k4d_eval.evaluate import Settings, evaluate_clips
from k4d_eval.report import (
    GEOMETRY_COLUMNS,
    PAPER_ROWS,
    VIDEO_COLUMNS,
    build_report,
    summary_csv,
    summary_markdown,
)

T, H, W = 3, 24, 32


def _truth(rng, frames) -> Clip:
    v, u = np.mgrid[0:H, 0:W]
    z = np.stack([1.5 + 0.1 * np.sin(u / 5.0 + t) for t in range(T)])
    pointmap = np.stack([(u - 16) / 30 * z, (v - 12) / 30 * z, z], -1).astype(np.float32)
    robot = np.zeros((T, H, W), bool)
    robot[:, 2:8, 2:12] = True
    return Clip(rgb=frames(rng, frames=T, height=H, width=W), pointmap=pointmap,
                valid=np.ones((T, H, W), bool), depth=pointmap[..., 2].copy(), robot_mask=robot)


def _noisy(gt: Clip, rng, rgb_noise: int, metres: float) -> Clip:
    rgb = np.clip(gt.rgb.astype(int) + rng.integers(-rgb_noise, rgb_noise + 1, gt.rgb.shape),
                  0, 255).astype(np.uint8)
    pointmap = gt.pointmap + rng.normal(0, metres, gt.pointmap.shape).astype(np.float32)
    return Clip(rgb=rgb, pointmap=pointmap, valid=gt.valid, depth=pointmap[..., 2].copy())


def _reported_names(report: dict) -> set[str]:
    """Every metric name report.json carries, in every section, the floor's included."""
    names = set()
    for section in (report, report["baseline"]):
        names |= set(section["metrics"]) | set(section["per_frame"])
        for region in section["regions"].values():
            names |= set(region)
        for per_frame in section["per_frame_regions"].values():
            names |= set(per_frame)
        for episode in section["episodes"]:
            names |= set(episode["metrics"])
    for row in PAPER_ROWS.values():
        names |= set(row)
    return names


@pytest.fixture
def report(rng, frames):
    gt = _truth(rng, frames)
    settings = Settings(geometry_pixels=0, threads=1)
    model = evaluate_clips(_noisy(gt, rng, 6, 0.002), gt, settings, episode_id="e")
    floor = evaluate_clips(_noisy(gt, rng, 40, 0.02), gt, settings, episode_id="e")
    learned_values = {info.name: 0.5 for info in learned.OUTPUTS}
    return build_report([model], settings.to_json(), baseline=[floor], learned=learned_values,
                        baseline_learned=learned_values)


def test_every_reported_metric_is_a_registry_entry_with_a_direction(report):
    names = _reported_names(report)
    assert {"psnr", "mse", "ssim", "fscore_k4d", "temporal_chamfer_l1_gt", "lpips"} <= names
    for name in names:
        info = metric_registry.info(name)
        assert info.name == name
        if name.startswith("temporal_"):  # how much the scene moved: no better direction
            assert info.higher_is_better is None, name
        else:
            assert isinstance(info.higher_is_better, bool), name
    # the tables and the CSV format every column through the registry
    columns = [key for _, key in VIDEO_COLUMNS] + [
        key.format(s=s) for s in ("_k4d", "") for _, key in GEOMETRY_COLUMNS]
    assert set(columns) <= set(metric_registry.METRICS)
    assert summary_markdown(report) and summary_csv(report)


def test_an_unregistered_name_is_an_error():
    with pytest.raises(KeyError, match="not in k4d_eval.metric_registry"):
        metric_registry.info("psnr_but_not_really")


def test_the_directions_rank_a_close_prediction_above_a_far_one(rng, frames):
    """higher_is_better is what the numbers do: for every metric with a direction, a
    prediction near the ground truth scores at least as well as a far one, and strictly
    better on the whole frame's PSNR, MSE, SSIM and Chamfer."""
    gt = _truth(rng, frames)
    settings = Settings(geometry_pixels=0, threads=1)
    near, far = (build_report([evaluate_clips(_noisy(gt, rng, noise, metres), gt, settings)],
                              settings.to_json())["metrics"]
                 for noise, metres in ((4, 0.001), (50, 0.05)))
    checked = 0
    for name, value in near.items():
        better = metric_registry.info(name).higher_is_better
        if better is None or value is None:
            continue
        assert (value >= far[name]) if better else (value <= far[name]), name
        checked += 1
    assert checked >= 16
    for name in ("psnr", "mse", "ssim", "chamfer_l1", "chamfer_l2_k4d"):
        assert near[name] != far[name], name


def test_the_evaluator_keeps_the_statistics_each_metric_declares(rng, frames):
    gt = _truth(rng, frames)
    result = evaluate_clips(_noisy(gt, rng, 6, 0.002), gt, Settings(geometry_pixels=0, threads=1))
    declared = {key: metric for metric, key, _ in
                metric_registry.groups(metric_registry.frame_metrics())}
    # psnr, ssim; chamfer, temporal, temporal_gt, depth, point x 2 spaces
    assert len(declared) == 2 + 5 * 2
    for region, groups in result.stats.items():
        for key, stats in groups.items():
            assert set(stats.arrays) == set(declared[key].stats), (region, key)
        whole_only = {k for k, m in declared.items() if m.whole_frame_only}
        assert whole_only <= set(groups) if region == "whole" else not whole_only & set(groups)


def test_names_are_unique_across_the_registry():
    reported = [info.name for metric, _, suffix in
                metric_registry.groups(metric_registry.frame_metrics())
                for info in metric.reported(suffix)] + [i.name for i in learned.OUTPUTS]
    assert len(reported) == len(set(reported)) == len(metric_registry.METRICS)
    # what LearnedMetrics computes is what the registry lists for it
    assert {i.name for i in learned.OUTPUTS} == set(learned.WEIGHT_FILES) | {"latent_l2"}


def test_point_l1_is_the_mean_absolute_coordinate_error(rng, frames):
    """Every point 2 cm off along z, and 2 cm off along x on half the pixels: point_l1 is
    the mean over x, y and z, in metres, per pixel (not the nearest neighbour's)."""
    gt = _truth(rng, frames)
    pointmap = gt.pointmap.copy()
    pointmap[..., 2] += 0.02
    pointmap[:, :, : pointmap.shape[2] // 2, 0] += 0.02
    pred = Clip(rgb=gt.rgb, pointmap=pointmap, valid=gt.valid, depth=pointmap[..., 2].copy())
    result = evaluate_clips(pred, gt, Settings(geometry_pixels=0, threads=1))
    metrics = build_report([result], Settings().to_json())["metrics"]
    assert abs(metrics["point_l1"] - (0.02 + 0.01) / 3) < 1e-6
