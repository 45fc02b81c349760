"""PSNR and SSIM agree with scikit-image to 1e-6; known values; regions; stats merge."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_eval import video_metrics
from k4d_eval.stats import FrameStats
from skimage.metrics import peak_signal_noise_ratio, structural_similarity


def _sk_ssim(pred, gt):
    return [structural_similarity(g, p, gaussian_weights=True, sigma=1.5,
                                  use_sample_covariance=False, data_range=255, channel_axis=-1)
            for p, g in zip(pred, gt, strict=True)]


def _sk_psnr(pred, gt):
    return [peak_signal_noise_ratio(g, p, data_range=255) for p, g in zip(pred, gt, strict=True)]


@pytest.mark.parametrize("kind", ["random", "real"])
def test_psnr_ssim_agree_with_scikit_image(rng, frames, kind):
    if kind == "random":
        gt = rng.integers(0, 256, (3, 40, 56, 3), dtype=np.uint8)
        pred = rng.integers(0, 256, gt.shape, dtype=np.uint8)
    else:
        gt = frames(rng)
        pred = np.clip(gt.astype(int) + rng.integers(-20, 21, gt.shape), 0, 255).astype(np.uint8)
    np.testing.assert_allclose(video_metrics.psnr(pred, gt), _sk_psnr(pred, gt), rtol=0, atol=1e-6)
    np.testing.assert_allclose(video_metrics.ssim(pred, gt), _sk_ssim(pred, gt), rtol=0, atol=1e-6)


def test_known_values():
    gt = np.zeros((2, 16, 16, 3), dtype=np.uint8)
    pred = gt.copy()
    pred[0] += 1   # MSE 1 -> 20 log10(255) dB
    pred[1] += 10  # MSE 100 -> 20 log10(25.5)
    np.testing.assert_allclose(video_metrics.psnr(pred, gt), [20 * np.log10(255), 20 * np.log10(25.5)])
    # Constant images: mean terms only, SSIM = (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1).
    c1 = (0.01 * 255) ** 2
    expected = [c1 / (1 + c1), c1 / (100 + c1)]
    np.testing.assert_allclose(video_metrics.ssim(pred, gt), expected, rtol=1e-12)


def test_identical_frames_are_perfect(rng, frames):
    gt = frames(rng)
    assert np.all(video_metrics.psnr(gt, gt) == video_metrics.PSNR_MAX_DB)
    np.testing.assert_allclose(video_metrics.ssim(gt, gt), 1.0, atol=1e-12)


def test_regions_measure_only_their_pixels(rng, frames):
    gt = frames(rng, frames=2)
    pred = gt.copy()
    left = np.zeros(gt.shape[:3], dtype=bool)
    left[:, :, :32] = True
    pred[:, :, 32:] = 255 - pred[:, :, 32:]  # damage only the right half
    regions = {"left": left, "right": ~left}
    psnr = {k: video_metrics._psnr_compute(v) for k, v in video_metrics._psnr_update(pred, gt, regions).items()}
    assert np.all(psnr["left"] == video_metrics.PSNR_MAX_DB)
    assert np.all(psnr["right"] < 15)
    # Region MSE is the plain mean over the region's values.
    err = (pred[0, :, 32:].astype(float) - gt[0, :, 32:]) ** 2
    assert psnr["right"][0] == pytest.approx(10 * np.log10(255 ** 2 / err.mean()), abs=1e-9)
    ssim = {k: video_metrics._ssim_compute(v) for k, v in video_metrics._ssim_update(pred, gt, regions).items()}
    # Left region pixels far from the seam see an unchanged window: SSIM 1 there.
    far_left = np.zeros_like(left)
    far_left[:, :, :20] = True
    far = video_metrics._ssim_compute(video_metrics._ssim_update(pred, gt, {"f": far_left})["f"])
    np.testing.assert_allclose(far, 1.0, atol=1e-12)
    assert np.all(ssim["right"] < 0.5)


def test_empty_region_frame_has_no_value(rng, frames):
    gt = frames(rng, frames=2)
    mask = np.zeros(gt.shape[:3], dtype=bool)
    mask[1] = True
    stats = video_metrics._psnr_update(gt, gt, {"r": mask})["r"]
    values = video_metrics._psnr_compute(stats)
    assert np.isnan(values[0]) and values[1] == video_metrics.PSNR_MAX_DB


def test_stats_merge_across_episodes_equals_joint_computation(rng, frames):
    a = frames(rng, frames=2)
    b = frames(rng, frames=3)
    pa = np.clip(a.astype(int) + 7, 0, 255).astype(np.uint8)
    pb = np.clip(b.astype(int) - 9, 0, 255).astype(np.uint8)
    whole = lambda x: {"w": np.ones(x.shape[:3], dtype=bool)}  # noqa: E731
    merged = video_metrics._ssim_update(pa, a, whole(a))["w"].cat(video_metrics._ssim_update(pb, b, whole(b))["w"])
    joint = np.concatenate([video_metrics.ssim(pa, a), video_metrics.ssim(pb, b)])
    np.testing.assert_allclose(video_metrics._ssim_compute(merged), joint)
    again = FrameStats.from_json(merged.to_json())
    np.testing.assert_array_equal(again["ssim_sum"], merged["ssim_sum"])


def test_agreement_on_the_shipped_scene_render(rng):
    """A real rendered frame (examples/panda_pick/scene.png) and a shifted, noisy copy."""
    from pathlib import Path

    from PIL import Image

    scene = Path(__file__).resolve().parents[3] / "examples" / "panda_pick" / "scene.png"
    gt = np.asarray(Image.open(scene).convert("RGB"))[100:260, 200:440][None]
    pred = np.roll(gt, 2, axis=2)
    pred = np.clip(pred.astype(int) + rng.integers(-6, 7, pred.shape), 0, 255).astype(np.uint8)
    np.testing.assert_allclose(video_metrics.psnr(pred, gt), _sk_psnr(pred, gt), rtol=0, atol=1e-6)
    np.testing.assert_allclose(video_metrics.ssim(pred, gt), _sk_ssim(pred, gt), rtol=0, atol=1e-6)
