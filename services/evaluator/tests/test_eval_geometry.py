"""Chamfer, F-score, depth and the Kinema4D normalisation: brute-force references,
hand-made known values, identical inputs perfect."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_eval import geometry


def _brute(pred, gt, tau):
    d = np.linalg.norm(pred[:, None, :] - gt[None, :, :], axis=-1)
    d_pg, d_gp = d.min(axis=1), d.min(axis=0)
    p, r = np.mean(d_pg < tau), np.mean(d_gp < tau)
    return {"chamfer_l1": 0.5 * (d_pg.mean() + d_gp.mean()),
            "chamfer_l2": 0.5 * (np.mean(d_pg ** 2) + np.mean(d_gp ** 2)),
            "precision": p, "recall": r, "fscore": 0.0 if p + r == 0 else 2 * p * r / (p + r)}


@pytest.mark.parametrize("tau", [0.01, 0.05, 0.2])
def test_chamfer_and_fscore_match_brute_force(rng, tau):
    gt = rng.normal(0, 0.3, (700, 3)) + [0, 0, 1.5]
    pred = np.concatenate([gt[:500] + rng.normal(0, 0.02, (500, 3)), rng.uniform(-1, 1, (90, 3))])
    got = geometry.chamfer(pred, gt, tau)
    want = _brute(pred, gt, tau)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_hand_made_known_values():
    gt = np.array([[0.0, 0, 1], [1, 0, 1]])
    pred = np.array([[0.0, 0, 1.005], [0, 0, 1.5]])
    # pred -> gt: 0.005, 0.5; gt -> pred: 0.005, sqrt(1 + 0.005^2) (to the first pred point)
    far = np.sqrt(1 + 0.005**2)
    got = geometry.chamfer(pred, gt, tau=0.01)
    assert got["chamfer_l1"] == pytest.approx(0.5 * ((0.005 + 0.5) / 2 + (0.005 + far) / 2))
    assert got["chamfer_l2"] == pytest.approx(0.5 * ((0.005**2 + 0.25) / 2 + (0.005**2 + far**2) / 2))
    assert got["precision"] == 0.5 and got["recall"] == 0.5 and got["fscore"] == 0.5


def test_identical_clouds_are_perfect(rng):
    cloud = rng.normal(size=(1000, 3))
    got = geometry.chamfer(cloud, cloud.copy())
    assert got == {"chamfer_l1": 0.0, "chamfer_l2": 0.0, "precision": 1.0, "recall": 1.0,
                   "fscore": 1.0}


def test_no_overlap_gives_zero_fscore():
    got = geometry.chamfer(np.zeros((3, 3)), np.ones((4, 3)), tau=0.01)
    assert got["fscore"] == 0.0 and got["chamfer_l1"] == pytest.approx(np.sqrt(3))


def test_empty_cloud_frame_has_no_value():
    stats = geometry._chamfer_update([np.zeros((0, 3)), np.zeros((2, 3))],
                                     [np.zeros((5, 3)), np.zeros((2, 3))])
    values = geometry._chamfer_compute(stats)
    assert np.isnan(values["chamfer_l1"][0]) and np.isnan(values["fscore"][0])
    assert values["chamfer_l1"][1] == 0.0 and values["fscore"][1] == 1.0


def test_kinema4d_normalisation_matches_the_codec_and_the_formula(rng):
    from k4d.pointmap_codec import normalise as codec_normalise

    H, W = 40, 50
    pointmap = (rng.normal(0, [0.5, 0.2, 0.1], (H, W, 3)) + [0.1, -0.2, 2.0]).astype(np.float32)
    valid = rng.random((H, W)) < 0.8
    points = pointmap[valid].astype(np.float64)
    norm = geometry.normalisation(points)
    q = geometry.normalise(points, norm)
    codec_q, centre, scale, _, _ = codec_normalise(pointmap[None], valid[None])
    np.testing.assert_allclose(q, codec_q[0][valid], atol=1e-12)
    np.testing.assert_allclose(norm[2], centre[0]) and norm[3] == pytest.approx(scale[0])
    lo, hi = np.percentile(points, [2, 98], axis=0)
    assert norm[3] == pytest.approx((hi - lo).max() / 2)
    assert np.isclose(np.abs(q[:, 0]).max(), 1.0)  # the longest axis spans [-1, 1]
    # Scale invariance: a cloud and its 3x copy normalise to the same points.
    q3 = geometry.normalise(points * 3, geometry.normalisation(points * 3))
    np.testing.assert_allclose(q3, q, atol=1e-12)


def test_depth_known_values():
    z_gt = np.array([1.0, 2.0, 4.0, 1.0])
    z_pred = np.array([1.1, 2.0, 2.0, 1.3])
    stats = geometry.depth_stats(z_pred, z_gt)
    assert stats["absrel_sum"] / stats["n"] == pytest.approx((0.1 + 0 + 0.5 + 0.3) / 4)
    assert stats["delta1_count"] == 2  # 1.1 and 1.0 ratios; 2.0 and 1.3 fail


def test_region_chamfer_reusing_the_whole_frame_search_equals_brute_force(rng):
    """Regions reuse the whole-frame nearest neighbours (geometry.region_distances); the
    result must equal a brute-force Chamfer of each region's own clouds."""
    from k4d_eval.clip import Clip
    from k4d_eval.evaluate import Settings, evaluate_clips, metric_values

    T, H, W = 2, 14, 18
    gt_pm = rng.normal(0, 0.2, (T, H, W, 3)).astype(np.float32) + np.float32([0, 0, 1.5])
    pred_pm = (gt_pm + rng.normal(0, 0.03, gt_pm.shape)).astype(np.float32)
    pred_pm[:, :3] = gt_pm[:, -3:]  # points that find their neighbour outside the region
    gt_valid = rng.random((T, H, W)) < 0.9
    pred_valid = rng.random((T, H, W)) < 0.9
    robot = np.zeros((T, H, W), bool)
    robot[:, 2:9, 3:12] = True
    rgb = rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8)
    gt = Clip(rgb=rgb, pointmap=gt_pm, valid=gt_valid, depth=gt_pm[..., 2].copy(), robot_mask=robot)
    pred = Clip(rgb=rgb, pointmap=pred_pm, valid=pred_valid, depth=pred_pm[..., 2].copy())
    result = evaluate_clips(pred, gt, Settings(geometry_pixels=0, tau=0.05, threads=1))
    for region, mask in (("whole", np.ones_like(robot)), ("robot", robot), ("environment", ~robot)):
        values = metric_values(result.stats[region])
        for t in range(T):
            want = _brute(pred_pm[t][pred_valid[t] & mask[t]].astype(float),
                          gt_pm[t][gt_valid[t] & mask[t]].astype(float), 0.05)
            for key in ("chamfer_l1", "chamfer_l2", "fscore"):
                assert values[key][t] == pytest.approx(want[key], rel=1e-9), (region, t, key)


def _small_pair(rng, T=4, H=12, W=16):
    from k4d_eval.clip import Clip

    gt_pm = rng.normal(0, 0.2, (T, H, W, 3)).astype(np.float32) + np.float32([0, 0, 1.5])
    gt_pm += np.linspace(0, 0.1, T, dtype=np.float32)[:, None, None, None]  # the scene drifts
    pred_pm = (gt_pm + rng.normal(0, 0.03, gt_pm.shape)).astype(np.float32)
    gt_valid, pred_valid = rng.random((T, H, W)) < 0.9, rng.random((T, H, W)) < 0.9
    robot = np.zeros((T, H, W), bool)
    robot[:, 2:7, 3:11] = True
    rgb = rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8)
    gt = Clip(rgb=rgb, pointmap=gt_pm, valid=gt_valid, depth=gt_pm[..., 2].copy(), robot_mask=robot)
    pred = Clip(rgb=rgb, pointmap=pred_pm, valid=pred_valid, depth=pred_pm[..., 2].copy())
    return pred, gt


def test_temporal_variants_match_brute_force_in_both_spaces(rng):
    """Temporal Chamfer/F-score (frame t against t-1 of the same clip, whole frame), in
    metres and in the Kinema4D normalisation (each frame normalised over its own points),
    equal a brute-force Chamfer of the two frames' clouds. The evaluator reuses each
    frame's trees for both of its pairs, so this also checks that reuse."""
    from k4d_eval.evaluate import Settings, evaluate_clips, metric_values

    pred, gt = _small_pair(rng, T=5)
    tau = 0.05
    values = metric_values(evaluate_clips(pred, gt, Settings(geometry_pixels=0, tau=tau,
                                                             threads=1)).stats["whole"])
    for clip, tail in ((pred, ""), (gt, "_gt")):
        assert np.isnan(values[f"temporal_chamfer_l1{tail}"][0])
        for t in range(1, clip.frames):
            now = clip.pointmap[t][clip.valid[t]].astype(float)
            before = clip.pointmap[t - 1][clip.valid[t - 1]].astype(float)
            spaces = {"": (now, before),
                      "_k4d": (geometry.normalise(now, geometry.normalisation(now)),
                               geometry.normalise(before, geometry.normalisation(before)))}
            for suffix, (a, b) in spaces.items():
                want = _brute(a, b, tau)
                for key in ("chamfer_l1", "chamfer_l2", "fscore"):
                    got = values[f"temporal_{key}{tail}{suffix}"][t]
                    assert got == pytest.approx(want[key], rel=1e-9), (tail, suffix, t, key)


@pytest.mark.parametrize("pixels", [0, 60])
def test_result_does_not_depend_on_threads(rng, pixels):
    """Frames run in consecutive runs per thread, each carrying its trees to the next
    frame: 1, 2 and 3 threads (different run boundaries) give the same statistics."""
    from k4d_eval.evaluate import Settings, evaluate_clips

    pred, gt = _small_pair(rng, T=7)
    results = [evaluate_clips(pred, gt, Settings(geometry_pixels=pixels, threads=n),
                              synthetic=True).to_json()["stats"] for n in (1, 2, 3)]
    assert results[0] == results[1] == results[2]
    assert "temporal_k4d" in results[0]["whole"]


def test_frame_normalisation_equals_normalisation_of_the_valid_points(rng):
    pointmap = rng.normal(0, 0.4, (20, 30, 3)).astype(np.float32)
    valid = rng.random((20, 30)) < 0.7
    got = geometry.frame_normalisation(pointmap, valid)
    want = geometry.normalisation(pointmap[valid])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert geometry.frame_normalisation(pointmap, np.zeros_like(valid))[3] == 1.0
