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
