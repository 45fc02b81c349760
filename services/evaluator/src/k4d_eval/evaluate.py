"""Evaluate one predicted clip against its ground truth: per-region, per-frame sufficient
statistics of every CPU metric (`EpisodeResult`), and the metric values they reduce to."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
from k4d.errors import InvalidArgument

from k4d_eval import geometry, metric_registry, video_metrics
from k4d_eval.clip import Clip
from k4d_eval.regions import build_regions
from k4d_eval.stats import FrameStats, frame_mean

# Pixels sampled per frame for the geometry metrics (the same pixels of prediction and
# ground truth, so equal inputs stay exactly equal); 0 = every pixel.
DEFAULT_GEOMETRY_PIXELS = 20_000


@dataclass(frozen=True)
class Settings:
    tau: float = geometry.DEFAULT_TAU
    geometry_pixels: int = DEFAULT_GEOMETRY_PIXELS
    seed: int = 0
    clip_percentiles: tuple[float, float] = geometry.CLIP_PERCENTILES
    psnr_max_db: float = video_metrics.PSNR_MAX_DB
    # How the work runs, not what it measures (left out of to_json and the cache key).
    threads: int = field(default_factory=lambda: os.cpu_count() or 1, compare=False)
    query_workers: int = field(default=1, compare=False)

    def to_json(self) -> dict:
        data = asdict(self)
        del data["threads"], data["query_workers"]
        data["clip_percentiles"] = list(self.clip_percentiles)
        data["ssim"] = {"window": "gaussian 11x11", "sigma": video_metrics.SSIM_SIGMA,
                        "k1": video_metrics.SSIM_K1, "k2": video_metrics.SSIM_K2, "covariance": "population",
                        "border_excluded_px": video_metrics.SSIM_PAD}
        data["psnr_data_range"] = video_metrics.DATA_RANGE
        data["geometry_sampling"] = {
            "pixels_per_frame": self.geometry_pixels or "all", "seed": self.seed,
            "how": "the same pixels of prediction and ground truth, drawn per frame from "
                   "(seed, frame index); invalid points dropped after sampling",
            "compare": "Chamfer distances and above all F-score depend on how densely the "
                       "clouds are sampled: compare numbers only at equal geometry_pixels, "
                       "image size and tau (docs/evaluation.md)"}
        data["spaces"] = {"m": "metres, first-frame camera",
                          "k4d": "Kinema4D normalisation (first-frame camera, per-frame "
                                 "percentile clip, centre + isotropic scale)"}
        return data

    def check(self) -> None:
        if not (math.isfinite(self.tau) and self.tau > 0):
            raise InvalidArgument.for_field("tau", f"must be a finite number > 0, got {self.tau}")
        if self.geometry_pixels < 0:
            raise InvalidArgument.for_field("geometry_pixels", "must be >= 0 (0 = every pixel)")
        lo, hi = self.clip_percentiles
        if not 0 <= lo < hi <= 100:
            raise InvalidArgument.for_field("clip_percentiles", "need 0 <= low < high <= 100")


@dataclass
class EpisodeResult:
    """region -> group -> FrameStats, for one episode. Groups: one per metric of
    k4d_eval.metric_registry: psnr, ssim, and per space s in geometry.SPACES chamfer_s,
    depth_s, and (whole frame only) temporal_s (prediction t-1 -> t), temporal_gt_s."""

    episode_id: str
    frames: int
    stats: dict[str, dict[str, FrameStats]] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"episode_id": self.episode_id, "frames": self.frames, "info": self.info,
                "stats": {r: {g: s.to_json() for g, s in groups.items()}
                          for r, groups in self.stats.items()}}

    @classmethod
    def from_json(cls, data: dict) -> EpisodeResult:
        return cls(data["episode_id"], int(data["frames"]),
                   {r: {g: FrameStats.from_json(s) for g, s in groups.items()}
                    for r, groups in data["stats"].items()}, dict(data.get("info", {})))


def check_pair(pred: Clip, gt: Clip) -> None:
    """Shapes and values both clips must agree on (one clear InvalidArgument each)."""
    if pred.rgb.ndim != 4 or pred.rgb.shape[-1] != 3:
        raise InvalidArgument.for_field("pred.rgb", f"expected (T, H, W, 3), got {pred.rgb.shape}")
    if gt.rgb.ndim != 4 or gt.rgb.shape[-1] != 3:
        raise InvalidArgument.for_field("gt.rgb", f"expected (T, H, W, 3), got {gt.rgb.shape}")
    if pred.frames != gt.frames:
        raise InvalidArgument.for_field(
            "frames", f"prediction has {pred.frames} frames, ground truth {gt.frames}")
    if pred.size != gt.size:
        raise InvalidArgument.for_field(
            "rgb", f"prediction is {pred.size[0]}x{pred.size[1]}, ground truth "
                   f"{gt.size[0]}x{gt.size[1]} (H x W)")
    for name, clip in (("pred", pred), ("gt", gt)):
        if clip.pointmap is None:
            continue
        if clip.pointmap.shape != clip.rgb.shape:
            raise InvalidArgument.for_field(
                f"{name}.pointmap", f"expected {clip.rgb.shape}, got {clip.pointmap.shape}")
        if not np.any(clip.valid):
            raise InvalidArgument.for_field(f"{name}.mask", "no valid point in any frame (empty mask)")
    for name, mask in (("gt.robot_mask", gt.robot_mask),):
        if mask is not None and mask.shape != gt.rgb.shape[:3]:
            raise InvalidArgument.for_field(name, f"expected {gt.rgb.shape[:3]}, got {mask.shape}")


def evaluate_clips(pred: Clip, gt: Clip, settings: Settings = Settings(), *,
                   episode_id: str = "pair", condition_robot_mask: np.ndarray | None = None,
                   synthetic: bool = False) -> EpisodeResult:
    """Every CPU metric of `pred` against `gt`, per region and frame. Frames run on
    `settings.threads` threads (scipy's filters and KD-trees release the GIL)."""
    check_pair(pred, gt)
    if condition_robot_mask is not None and condition_robot_mask.shape != gt.rgb.shape[:3]:
        raise InvalidArgument.for_field(
            "robot.mask", f"expected {gt.rgb.shape[:3]}, got {condition_robot_mask.shape}")
    regions = build_regions(gt, condition_robot_mask, synthetic)
    geometry_on = pred.has_geometry and gt.has_geometry
    T = gt.frames
    measured = [(metric, key) for metric, key, _ in
                metric_registry.groups(metric_registry.frame_metrics(settings.psnr_max_db))
                if geometry_on or not metric.geometry]
    result = EpisodeResult(episode_id, T)
    for name in regions:
        result.stats[name] = {key: FrameStats.zeros(T, metric.stats) for metric, key in measured
                              if not metric.whole_frame_only}
    result.stats["whole"].update({key: FrameStats.zeros(T, metric.stats)
                                  for metric, key in measured if metric.whole_frame_only})

    def run(frames: range) -> list:
        # Frame t's clouds and trees serve its temporal pair (t, t+1): carried to the next
        # frame of the run instead of being built again.
        out, clouds, prev = [], None, None
        for t in frames:
            if geometry_on:
                if clouds is None and t > 0:
                    clouds = _frame_clouds(t - 1, pred, gt, settings)
                prev, clouds = clouds, _frame_clouds(t, pred, gt, settings)
            out.append((t, _frame_stats(t, pred, gt, regions, settings, clouds, prev)))
        return out

    with ThreadPoolExecutor(max_workers=max(1, settings.threads)) as pool:
        for frames in pool.map(run, _runs(T, settings.threads)):
            for t, stats in frames:
                for name, by_group in stats.items():
                    for group, values in by_group.items():
                        result.stats[name][group].add(t, values)
    result.info = {"regions": {name: int(mask.sum()) for name, mask in regions.items()},
                   "robot_region": "condition" if condition_robot_mask is not None
                   else ("ground truth robot_mask" if gt.robot_mask is not None else "none")}
    return result


def _runs(frames: int, threads: int) -> list[range]:
    """Consecutive frame runs for the threads: two per thread, so a thread slowed by other
    work hands the rest to the other (each run rebuilds one frame's clouds, ~1 %)."""
    count = 1 if threads <= 1 else min(frames, 2 * threads)
    bounds = np.linspace(0, frames, count + 1).round().astype(int)
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


@dataclass
class _Cloud:
    """One clip's sampled points of one frame: flat pixel indices (N,), the frame's
    Kinema4D normalisation, and per space the (N, 3) float64 points and their KD-tree."""

    idx: np.ndarray
    norm: tuple
    points: dict[str, np.ndarray]
    trees: dict[str, object]


def _sample_pixels(settings: Settings, t: int, pixels: int) -> np.ndarray | None:
    """Frame t's pixel sample: the same for prediction and ground truth, and the same
    whichever thread computes it (seeded by (seed, t))."""
    count = settings.geometry_pixels
    if count <= 0 or count >= pixels:
        return None
    rng = np.random.default_rng([settings.seed, t])
    return np.sort(rng.choice(pixels, size=count, replace=False))


def _frame_clouds(t: int, pred: Clip, gt: Clip, settings: Settings) -> dict[str, _Cloud]:
    """side ("pred", "gt") -> frame t's sampled cloud, normalised over ALL the frame's valid
    points, with one KD-tree per space (shared by the pair, region and temporal searches)."""
    H, W = gt.size
    sample = _sample_pixels(settings, t, H * W)
    out = {}
    for side, clip in (("pred", pred), ("gt", gt)):
        norm = geometry.frame_normalisation(clip.pointmap[t], clip.valid[t],
                                            settings.clip_percentiles)
        valid = clip.valid[t].reshape(-1)
        idx = np.flatnonzero(valid) if sample is None else sample[valid[sample]]
        metres = clip.pointmap[t].reshape(-1, 3)[idx].astype(np.float64)
        points = {"m": metres, "k4d": geometry.normalise(metres, norm)}
        out[side] = _Cloud(idx, norm, points, {s: geometry.tree(p, queries=3) for s, p in points.items()})
    return out


def _frame_stats(t: int, pred: Clip, gt: Clip, regions: Mapping[str, np.ndarray],
                 settings: Settings, clouds: dict[str, _Cloud] | None,
                 prev: dict[str, _Cloud] | None) -> dict[str, dict[str, dict[str, float]]]:
    """region -> group -> additive stats of frame t (`clouds`: frame t's, `prev`: frame
    t-1's, None without geometry or at t = 0)."""
    masks = {name: mask[t] for name, mask in regions.items()}
    psnr = video_metrics.psnr_frame_stats(pred.rgb[t], gt.rgb[t], masks)
    ssim = video_metrics.ssim_frame_stats(pred.rgb[t], gt.rgb[t], masks)
    out = {name: {"psnr": psnr[name], "ssim": ssim[name]} for name in regions}
    if clouds is None:
        return out
    depth_terms = _depth_frame(t, pred, gt, clouds["pred"].norm, clouds["gt"].norm)
    point_terms = _point_frame(t, pred, gt, clouds["pred"].norm, clouds["gt"].norm)
    for name, mask in masks.items():
        _depth_stats(out[name], mask, depth_terms)
        _point_stats(out[name], mask, point_terms)
    _chamfer_regions(out, masks, clouds, settings)
    if prev is not None:
        # Temporal consistency (whole frame): frame t against frame t-1 of the same clip.
        for side, kind in (("pred", "temporal"), ("gt", "temporal_gt")):
            now, before = clouds[side], prev[side]
            for s in geometry.SPACES:
                out["whole"][f"{kind}_{s}"] = geometry.chamfer_stats(
                    now.points[s], now.trees[s], before.points[s], before.trees[s],
                    settings.tau, settings.query_workers)
    return out


def _chamfer_regions(out: dict, masks: Mapping[str, np.ndarray], clouds: dict[str, _Cloud],
                     settings: Settings) -> None:
    """Chamfer/F-score stats of every region and space into out[region]["chamfer_<space>"]:
    one search over the whole frame; regions reuse it (exact, see region_distances)."""
    pred, gt = clouds["pred"], clouds["gt"]
    inside = {name: (mask.reshape(-1)[pred.idx], mask.reshape(-1)[gt.idx])
              for name, mask in masks.items()}
    workers = settings.query_workers
    for s in geometry.SPACES:
        P, G, p_tree, g_tree = pred.points[s], gt.points[s], pred.trees[s], gt.trees[s]
        if p_tree is None or g_tree is None:
            for name in masks:
                out[name][f"chamfer_{s}"] = dict.fromkeys(geometry.CHAMFER_STATS, 0.0)
            continue
        d_pg, i_pg = g_tree.query(P, k=1, workers=workers)
        d_gp, i_gp = p_tree.query(G, k=1, workers=workers)
        for name, (p_in, g_in) in inside.items():
            if not p_in.any() or not g_in.any():
                out[name][f"chamfer_{s}"] = dict.fromkeys(geometry.CHAMFER_STATS, 0.0)
                continue
            out[name][f"chamfer_{s}"] = geometry.stats_from_distances(
                geometry.region_distances(d_pg, i_pg, P, p_in, G, g_in, workers),
                geometry.region_distances(d_gp, i_gp, G, g_in, P, p_in, workers),
                settings.tau)


def _depth_frame(t: int, pred: Clip, gt: Clip, pred_norm: tuple, gt_norm: tuple
                 ) -> dict[str, tuple]:
    """Per-pixel depth terms of frame t, once for every region: space -> (pixels valid in
    both (H, W), |ratio - 1| (N,), delta1 hit (N,)). k4d space: each depth divided by its
    own clip's normalisation scale for the frame."""
    z_pred, z_gt = pred.depth[t], gt.depth[t]
    both = pred.valid[t] & gt.valid[t] & (z_pred > 0) & (z_gt > 0)
    ratio = z_pred[both].astype(np.float64) / z_gt[both].astype(np.float64)
    out = {}
    for s, factor in (("m", 1.0), ("k4d", gt_norm[3] / pred_norm[3])):
        r = ratio * factor
        out[s] = (both, np.abs(r - 1.0), np.maximum(r, 1.0 / r) < geometry.DELTA1)
    return out


def _point_frame(t: int, pred: Clip, gt: Clip, pred_norm: tuple, gt_norm: tuple
                 ) -> dict[str, tuple]:
    """Per-pixel pointmap L1 terms of frame t: space -> (pixels valid in both (H, W), the sum
    of |dx| + |dy| + |dz| per such pixel (N,)); k4d space: each clip's own normalisation."""
    both = pred.valid[t] & gt.valid[t]
    p, g = pred.pointmap[t][both].astype(np.float64), gt.pointmap[t][both].astype(np.float64)
    return {"m": (both, np.abs(p - g).sum(axis=1)),
            "k4d": (both, np.abs(geometry.normalise(p, pred_norm)
                                 - geometry.normalise(g, gt_norm)).sum(axis=1))}


def _point_stats(groups: dict, region: np.ndarray, terms: dict) -> None:
    for s, (both, l1) in terms.items():
        inside = region[both]
        groups[f"point_{s}"] = {"l1_sum": float(l1[inside].sum()),
                                "n": float(np.count_nonzero(inside))}


def _depth_stats(groups: dict, region: np.ndarray, terms: dict) -> None:
    """Depth AbsRel / delta1 sums of one region from the frame's per-pixel terms."""
    for s, (both, absrel, hit) in terms.items():
        inside = region[both]
        groups[f"depth_{s}"] = {"absrel_sum": float(absrel[inside].sum()),
                                "delta1_count": float(np.count_nonzero(hit[inside])),
                                "n": float(np.count_nonzero(inside))}


def metric_values(groups: Mapping[str, FrameStats], psnr_max_db: float = video_metrics.PSNR_MAX_DB
                  ) -> dict[str, np.ndarray]:
    """group stats of one region -> metric name -> (T,) per-frame values (NaN: no value),
    by every metric of the registry whose group was measured (temporal: whole frame only;
    geometry: when both clips have it)."""
    values: dict[str, np.ndarray] = {}
    for metric, key, suffix in metric_registry.groups(metric_registry.frame_metrics(psnr_max_db)):
        if key in groups:
            values.update(metric.values(groups[key], suffix))
    return values


def summarise(groups: Mapping[str, FrameStats], psnr_max_db: float = video_metrics.PSNR_MAX_DB
              ) -> dict[str, float | None]:
    """group stats -> metric name -> mean over frames (None when no frame has a value)."""
    return {name: frame_mean(v) for name, v in metric_values(groups, psnr_max_db).items()}
