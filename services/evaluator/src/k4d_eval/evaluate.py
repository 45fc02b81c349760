"""Evaluate one predicted clip against its ground truth: per-region, per-frame sufficient
statistics of every CPU metric (`EpisodeResult`), and the metric values they reduce to."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
from k4d.errors import InvalidArgument

from k4d_eval import geometry, video
from k4d_eval.clip import Clip
from k4d_eval.regions import build_regions
from k4d_eval.stats import FrameStats, frame_mean

# Pixels sampled per frame for the geometry metrics (the same pixels of prediction and
# ground truth, so equal inputs stay exactly equal); 0 = every pixel.
DEFAULT_GEOMETRY_PIXELS = 40_000
SPACES = ("m", "k4d")  # metres; the Kinema4D normalisation


@dataclass(frozen=True)
class Settings:
    tau: float = geometry.DEFAULT_TAU
    geometry_pixels: int = DEFAULT_GEOMETRY_PIXELS
    seed: int = 0
    clip_percentiles: tuple[float, float] = geometry.CLIP_PERCENTILES
    psnr_max_db: float = video.PSNR_MAX_DB
    workers: int = 1  # threads per KD-tree query

    def to_json(self) -> dict:
        data = asdict(self)
        data["clip_percentiles"] = list(self.clip_percentiles)
        data["ssim"] = {"window": "gaussian 11x11", "sigma": video.SSIM_SIGMA,
                        "k1": video.SSIM_K1, "k2": video.SSIM_K2, "covariance": "population",
                        "border_excluded_px": video.SSIM_PAD}
        data["psnr_data_range"] = video.DATA_RANGE
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
    """region -> group -> FrameStats, for one episode. Groups: psnr, ssim, and per space
    s in SPACES chamfer_s, temporal_s (prediction t-1 -> t), temporal_gt_s, depth_s."""

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
    """Every CPU metric of `pred` against `gt`, per region and frame."""
    check_pair(pred, gt)
    if condition_robot_mask is not None and condition_robot_mask.shape != gt.rgb.shape[:3]:
        raise InvalidArgument.for_field(
            "robot.mask", f"expected {gt.rgb.shape[:3]}, got {condition_robot_mask.shape}")
    regions = build_regions(gt, condition_robot_mask, synthetic)
    result = EpisodeResult(episode_id, gt.frames)
    psnr = video._psnr_update(pred.rgb, gt.rgb, regions)
    ssim = video._ssim_update(pred.rgb, gt.rgb, regions)
    for name in regions:
        result.stats[name] = {"psnr": psnr[name], "ssim": ssim[name]}
    if pred.has_geometry and gt.has_geometry:
        for name, groups in _geometry_update(pred, gt, regions, settings).items():
            result.stats[name].update(groups)
    result.info = {"regions": {name: int(mask.sum()) for name, mask in regions.items()},
                   "robot_region": "condition" if condition_robot_mask is not None
                   else ("ground truth robot_mask" if gt.robot_mask is not None else "none")}
    return result


def _sample_pixels(rng: np.random.Generator, pixels: int, count: int) -> np.ndarray | None:
    if count <= 0 or count >= pixels:
        return None
    return np.sort(rng.choice(pixels, size=count, replace=False))


def _geometry_update(pred: Clip, gt: Clip, regions: Mapping[str, np.ndarray],
                     settings: Settings) -> dict[str, dict[str, FrameStats]]:
    T, (H, W) = gt.frames, gt.size
    groups = [f"{kind}_{s}" for s in SPACES for kind in ("chamfer", "temporal", "temporal_gt")]
    out = {r: {g: FrameStats.zeros(T, geometry.CHAMFER_STATS) for g in groups} for r in regions}
    for r in regions:
        for s in SPACES:
            out[r][f"depth_{s}"] = FrameStats.zeros(T, geometry.DEPTH_STATS)
    rng = np.random.default_rng(settings.seed)
    previous: dict = {}
    for t in range(T):
        sample = _sample_pixels(rng, H * W, settings.geometry_pixels)
        clouds = {}
        for side, clip in (("pred", pred), ("gt", gt)):
            points = clip.pointmap[t].reshape(-1, 3)
            valid = clip.valid[t].reshape(-1)
            q, scale = geometry.normalise_frame(clip.pointmap[t], clip.valid[t],
                                                settings.clip_percentiles)
            idx = np.flatnonzero(valid) if sample is None else sample[valid[sample]]
            clouds[side] = (idx, {"m": points[idx].astype(np.float64), "k4d": q[idx]}, scale)
        current = {}
        for r, mask in regions.items():
            in_region = mask[t].reshape(-1)
            for s in SPACES:
                pts = {}
                for side in ("pred", "gt"):
                    idx, spaces, _ = clouds[side]
                    p = spaces[s][in_region[idx]]
                    pts[side] = (p, geometry.tree(p))
                current[(r, s)] = pts
                (p, p_tree), (g, g_tree) = pts["pred"], pts["gt"]
                out[r][f"chamfer_{s}"].add(t, geometry.chamfer_stats(
                    p, p_tree, g, g_tree, settings.tau, settings.workers))
                if t > 0:
                    (pp, pp_tree), (pg, pg_tree) = previous[(r, s)]["pred"], previous[(r, s)]["gt"]
                    out[r][f"temporal_{s}"].add(t, geometry.chamfer_stats(
                        p, p_tree, pp, pp_tree, settings.tau, settings.workers))
                    out[r][f"temporal_gt_{s}"].add(t, geometry.chamfer_stats(
                        g, g_tree, pg, pg_tree, settings.tau, settings.workers))
            _depth_update(out[r], t, pred, gt, mask[t], clouds)
        previous = current
    return out


def _depth_update(groups: dict[str, FrameStats], t: int, pred: Clip, gt: Clip,
                  region: np.ndarray, clouds: dict) -> None:
    """Depth on every pixel valid in both clips (no sampling: it is per pixel and cheap).
    k4d space: each depth divided by its own clip's normalisation scale for the frame."""
    z_pred, z_gt = pred.depth[t], gt.depth[t]
    both = region & pred.valid[t] & gt.valid[t] & (z_pred > 0) & (z_gt > 0)
    zp, zg = z_pred[both].astype(np.float64), z_gt[both].astype(np.float64)
    groups["depth_m"].add(t, geometry.depth_stats(zp, zg))
    groups["depth_k4d"].add(t, geometry.depth_stats(zp / clouds["pred"][2], zg / clouds["gt"][2]))


def metric_values(groups: Mapping[str, FrameStats], psnr_max_db: float = video.PSNR_MAX_DB
                  ) -> dict[str, np.ndarray]:
    """group stats of one region -> metric name -> (T,) per-frame values (NaN: no value)."""
    values: dict[str, np.ndarray] = {}
    if "psnr" in groups:
        values["psnr"] = video._psnr_compute(groups["psnr"], max_db=psnr_max_db)
    if "ssim" in groups:
        values["ssim"] = video._ssim_compute(groups["ssim"])
    for s in SPACES:
        suffix = "" if s == "m" else f"_{s}"
        if f"chamfer_{s}" in groups:
            for name, v in geometry._chamfer_compute(groups[f"chamfer_{s}"]).items():
                values[f"{name}{suffix}"] = v
            for kind in ("temporal", "temporal_gt"):
                tv = geometry._chamfer_compute(groups[f"{kind}_{s}"])
                tail = "_gt" if kind == "temporal_gt" else ""
                for name in ("chamfer_l1", "chamfer_l2", "fscore"):
                    values[f"temporal_{name}{tail}{suffix}"] = tv[name]
            for name, v in geometry._depth_compute(groups[f"depth_{s}"]).items():
                values[f"{name}{suffix}"] = v
    return values


def summarise(groups: Mapping[str, FrameStats], psnr_max_db: float = video.PSNR_MAX_DB
              ) -> dict[str, float | None]:
    """group stats -> metric name -> mean over frames (None when no frame has a value)."""
    return {name: frame_mean(v) for name, v in metric_values(groups, psnr_max_db).items()}
