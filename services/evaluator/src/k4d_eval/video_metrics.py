"""Video metrics as per-frame sufficient statistics: PSNR and SSIM, per region.

PSNR: data range 255, per frame 10 log10(255^2 / MSE) over the region's pixels and
channels, then the mean over frames. SSIM: Wang et al. 2004 as scikit-image computes it
(`structural_similarity(gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=255, channel_axis=-1)`): 11x11 Gaussian window (sigma 1.5, truncated at 3.5
sigma, reflected borders), population covariance, K1 0.01, K2 0.03, the SSIM map averaged
over channels, the 5-pixel border left out, then over the region's pixels per frame.
Agreement with scikit-image is tested to 1e-6.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import ndimage

from k4d_eval.stats import FrameMetric, FrameStats, MetricInfo, safe_ratio

DATA_RANGE = 255.0
SSIM_SIGMA = 1.5
SSIM_TRUNCATE = 3.5
SSIM_K1, SSIM_K2 = 0.01, 0.03
SSIM_PAD = int(SSIM_TRUNCATE * SSIM_SIGMA + 0.5)  # 5: the window is 11x11
# PSNR of two equal frames is infinite; reports cap it so JSON stays finite and means exist.
PSNR_MAX_DB = 100.0

PSNR_STATS = ("sse", "n")
SSIM_STATS = ("ssim_sum", "n")


def psnr_frame_stats(pred_frame: np.ndarray, gt_frame: np.ndarray,
                     masks: Mapping[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """One frame: region name -> {sse: sum of squared errors, n: number of values}."""
    err = pred_frame.astype(np.float64) - gt_frame.astype(np.float64)
    sq = np.einsum("hwc,hwc->hw", err, err)  # (H, W) summed over channels
    return {name: {"sse": float(sq[m].sum()), "n": float(m.sum()) * pred_frame.shape[-1]}
            for name, m in masks.items()}


def _psnr_update(pred: np.ndarray, gt: np.ndarray,
                 regions: Mapping[str, np.ndarray]) -> dict[str, FrameStats]:
    """pred, gt: (T, H, W, 3) uint8; regions: name -> (T, H, W) bool.
    -> name -> FrameStats(sse, n)."""
    T = pred.shape[0]
    out = {name: FrameStats.zeros(T, PSNR_STATS) for name in regions}
    for t in range(T):
        frame = psnr_frame_stats(pred[t], gt[t], {k: m[t] for k, m in regions.items()})
        for name, values in frame.items():
            out[name].add(t, values)
    return out


def _psnr_compute(stats: FrameStats, data_range: float = DATA_RANGE,
                  max_db: float = PSNR_MAX_DB) -> np.ndarray:
    """(T,) dB; NaN where the region is empty in that frame."""
    mse = safe_ratio(stats["sse"], stats["n"])
    with np.errstate(divide="ignore"):
        db = 10.0 * np.log10(data_range ** 2 / mse)
    return np.where(np.isnan(mse), np.nan, np.minimum(db, max_db))


def mse_compute(stats: FrameStats) -> np.ndarray:
    """(T,) mean squared error per value (levels squared); NaN where the region is empty."""
    return safe_ratio(stats["sse"], stats["n"])


def ssim_map(pred_frame: np.ndarray, gt_frame: np.ndarray,
             data_range: float = DATA_RANGE) -> np.ndarray:
    """(H, W, C) images -> (H, W) float64 SSIM map averaged over channels. Filters each
    moment separately and works in place (no stacked copies: this is the hot loop).
    Four blurs, not five: the denominator needs only vx + vy, and the filter is linear, so
    blur(x^2) + blur(y^2) is one blur(x^2 + y^2) (equal to float rounding, ~1e-16)."""
    def blur(image):  # float64 output whatever the input (uint8 frames are read as is)
        return ndimage.gaussian_filter(image, SSIM_SIGMA, truncate=SSIM_TRUNCATE,
                                       mode="reflect", axes=(0, 1), output=np.float64)

    ux, uy = blur(gt_frame), blur(pred_frame)
    xy = np.multiply(gt_frame, pred_frame, dtype=np.float64)
    squares = np.multiply(gt_frame, gt_frame, dtype=np.float64)
    squares += np.multiply(pred_frame, pred_frame, dtype=np.float64)
    vsum = blur(squares)  # E[x^2] + E[y^2]
    vxy = blur(xy)
    uxuy = ux * uy
    ux *= ux
    uy *= uy
    ux += uy  # ux^2 + uy^2
    vsum -= ux  # vx + vy
    vxy -= uxuy
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    # s = ((2 ux uy + c1)(2 vxy + c2)) / ((ux^2 + uy^2 + c1)(vx + vy + c2))
    num = uxuy
    num *= 2
    num += c1
    vxy *= 2
    vxy += c2
    num *= vxy
    den = ux
    den += c1
    vsum += c2
    den *= vsum
    num /= den
    return num.mean(axis=-1)


def interior_mask(height: int, width: int) -> np.ndarray:
    """(H, W) bool: pixels at least SSIM_PAD from the border (scikit-image's crop)."""
    inner = np.zeros((height, width), dtype=bool)
    inner[SSIM_PAD:height - SSIM_PAD, SSIM_PAD:width - SSIM_PAD] = True
    return inner


def ssim_frame_stats(pred_frame: np.ndarray, gt_frame: np.ndarray,
                     masks: Mapping[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """One frame: region name -> {ssim_sum over the region's interior pixels, n}."""
    s = ssim_map(pred_frame, gt_frame)
    inner = interior_mask(*s.shape)
    out = {}
    for name, mask in masks.items():
        m = mask & inner
        out[name] = {"ssim_sum": float(s[m].sum()), "n": float(m.sum())}
    return out


def _ssim_update(pred: np.ndarray, gt: np.ndarray,
                 regions: Mapping[str, np.ndarray]) -> dict[str, FrameStats]:
    """-> name -> FrameStats(ssim_sum, n)."""
    T = pred.shape[0]
    out = {name: FrameStats.zeros(T, SSIM_STATS) for name in regions}
    for t in range(T):
        frame = ssim_frame_stats(pred[t], gt[t], {k: m[t] for k, m in regions.items()})
        for name, values in frame.items():
            out[name].add(t, values)
    return out


def _ssim_compute(stats: FrameStats) -> np.ndarray:
    return safe_ratio(stats["ssim_sum"], stats["n"])


def psnr(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Whole-frame PSNR per frame (T,) of (T, H, W, C) clips."""
    whole = {"whole": np.ones(pred.shape[:3], dtype=bool)}
    return _psnr_compute(_psnr_update(pred, gt, whole)["whole"])


def ssim(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Whole-frame SSIM per frame (T,) of (T, H, W, C) clips."""
    whole = {"whole": np.ones(pred.shape[:3], dtype=bool)}
    return _ssim_compute(_ssim_update(pred, gt, whole)["whole"])


class PSNR(FrameMetric):
    """PSNR (dB, capped at `max_db`) and the MSE it comes from, per value in levels squared."""

    group = "psnr"
    stats = PSNR_STATS
    outputs = (MetricInfo("psnr", higher_is_better=True, fmt=".2f"),
               MetricInfo("mse", higher_is_better=False, fmt=".1f"))

    def __init__(self, data_range: float = DATA_RANGE, max_db: float = PSNR_MAX_DB):
        self.data_range, self.max_db = data_range, max_db

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        return {"psnr": _psnr_compute(stats, self.data_range, self.max_db),
                "mse": mse_compute(stats)}


class SSIM(FrameMetric):
    group = "ssim"
    stats = SSIM_STATS
    outputs = (MetricInfo("ssim", higher_is_better=True),)

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        return {"ssim": _ssim_compute(stats)}
