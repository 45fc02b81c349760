"""Geometry metrics as per-frame sufficient statistics, on point clouds with KD-trees.

Definitions (issue 12), for a predicted cloud P and a ground-truth cloud G of one frame:
  Chamfer L1 = (mean_{p in P} d(p, G) + mean_{g in G} d(g, P)) / 2, d = Euclidean distance
  Chamfer L2 = the same with squared distances
  F-score(tau) = 2 P R / (P + R), precision P = |{p : d(p, G) < tau}| / |P|, recall R the
  reverse (0 when both are 0)
  temporal variants: the same between consecutive frames of one clip (t-1 -> t)
  depth AbsRel = mean |z_pred - z_gt| / z_gt, delta1 = fraction max(z_pred/z_gt,
  z_gt/z_pred) < 1.25, over pixels valid in both.
Nearest neighbours come from `scipy.spatial.cKDTree` (exact), never brute force.

Kinema4D normalisation (REFERENCE section 2, the form the paper's numbers are in): points
in the first frame's camera, per frame clipped to the 2/98 percentiles per axis, centred on
the clip box's centre and divided by one isotropic scale (half the box's longest side), so
the clip box maps into [-1, 1].
"""

from __future__ import annotations

import numpy as np
from k4d.pointmap_codec import CLIP_PERCENTILES  # (2, 98), the codec's
from scipy.spatial import cKDTree

from k4d_eval.stats import FrameMetric, FrameStats, MetricInfo, safe_ratio

MIN_SCALE = 1e-6  # k4d.pointmap_codec's floor for a degenerate frame

# The spaces geometry is measured in: metres (first-frame camera) and the Kinema4D
# normalisation; a metric in a space other than metres carries its suffix (`_k4d`).
SPACES = ("m", "k4d")
DEFAULT_TAU = 0.01
CHAMFER_STATS = ("pg_l1", "pg_l2", "n_pred", "gp_l1", "gp_l2", "n_gt", "pred_in", "gt_in")
DEPTH_STATS = ("absrel_sum", "delta1_count", "n")
POINT_STATS = ("l1_sum", "n")
DELTA1 = 1.25


def normalisation(points: np.ndarray,
                  percentiles: tuple[float, float] = CLIP_PERCENTILES) -> tuple:
    """(N, 3) valid points of one frame (first-frame camera) -> (lo, hi, centre, scale) of
    the Kinema4D normalisation, exactly as k4d.pointmap_codec.normalise computes them
    (tested against it); here on points, so a sampled subset is normalised without
    materialising whole float64 frames."""
    return _normalisation([points[:, k] for k in range(3)], percentiles)


def frame_normalisation(pointmap: np.ndarray, valid: np.ndarray,
                        percentiles: tuple[float, float] = CLIP_PERCENTILES) -> tuple:
    """`normalisation(pointmap[valid])` of one (H, W, 3) frame and its (H, W) mask, without
    the (N, 3) copy: each axis's valid values are gathered once, contiguous (about half the
    time of the percentile along axis 0 of an (N, 3) array, with the same values)."""
    flat, keep = pointmap.reshape(-1, 3), valid.reshape(-1)
    return _normalisation([flat[:, k][keep] for k in range(3)], percentiles)


def _normalisation(axes: list[np.ndarray], percentiles: tuple[float, float]) -> tuple:
    """Three (N,) per-axis value arrays -> (lo, hi, centre, scale), see `normalisation`."""
    if len(axes[0]) == 0:
        zero = np.zeros(3)
        return zero, zero, zero, 1.0
    lo, hi = np.stack([np.percentile(a, percentiles) for a in axes], axis=1)
    centre = (lo + hi) / 2.0
    return lo, hi, centre, max(float((hi - lo).max()) / 2.0, MIN_SCALE)


def normalise(points: np.ndarray, frame_norm: tuple) -> np.ndarray:
    """(N, 3) points -> the normalised space of `frame_norm` (from `normalisation`)."""
    lo, hi, centre, scale = frame_norm
    return (np.clip(points, lo, hi) - centre) / scale


def tree(points: np.ndarray, queries: int = 1) -> cKDTree | None:
    """KD-tree of (N, 3) points, built for `queries` searches; None for an empty cloud."""
    if len(points) == 0:
        return None
    # Unbalanced trees build ~2x faster and query as fast on surface clouds. A tree
    # searched several times (a frame's: by the other clip and by both neighbouring
    # frames) pays for compact nodes and 32-point leaves: build + 3 queries of 20k points
    # ~15 % faster than the one-search setting (benchmarks/evaluation).
    if queries > 1:
        return cKDTree(points, leafsize=32, balanced_tree=False, compact_nodes=True)
    return cKDTree(points, balanced_tree=False, compact_nodes=False)


def nn_distances(points: np.ndarray, other: cKDTree, workers: int = 1) -> np.ndarray:
    """(N,) distance of each point to its nearest neighbour in `other`."""
    dist, _ = other.query(points, k=1, workers=workers)
    return dist


def chamfer_stats(pred: np.ndarray, pred_tree: cKDTree | None, gt: np.ndarray,
                  gt_tree: cKDTree | None, tau: float, workers: int = 1) -> dict[str, float]:
    """Additive Chamfer/F-score statistics of one frame's clouds (N, 3) and (M, 3).
    An empty side gives zero counts, so the frame has no value."""
    if pred_tree is None or gt_tree is None:
        return dict.fromkeys(CHAMFER_STATS, 0.0)
    return stats_from_distances(nn_distances(pred, gt_tree, workers),
                                nn_distances(gt, pred_tree, workers), tau)


def stats_from_distances(d_pg: np.ndarray, d_gp: np.ndarray, tau: float) -> dict[str, float]:
    """Chamfer/F-score statistics from both directions' nearest-neighbour distances."""
    # einsum, not np.dot: a BLAS dot of a 20k vector costs ~1 ms here (OpenBLAS wakes its
    # thread pool, which spins on the second core) against ~10 us for einsum's own loop.
    return {"pg_l1": float(d_pg.sum()), "pg_l2": float(np.einsum("i,i->", d_pg, d_pg)),
            "n_pred": float(len(d_pg)), "gp_l1": float(d_gp.sum()),
            "gp_l2": float(np.einsum("i,i->", d_gp, d_gp)), "n_gt": float(len(d_gp)),
            "pred_in": float(np.count_nonzero(d_pg < tau)),
            "gt_in": float(np.count_nonzero(d_gp < tau))}


def region_distances(d_all: np.ndarray, i_all: np.ndarray, src: np.ndarray,
                     src_in: np.ndarray, dst: np.ndarray, dst_in: np.ndarray,
                     workers: int = 1) -> np.ndarray:
    """Exact nearest-neighbour distances from the region's source points to the region's
    destination points, reusing the whole-frame search: d_all, i_all are each source
    point's nearest neighbour over ALL destination points. When that neighbour lies in
    the region it is also the nearest within the region (a subset); only the other points
    are searched again, in a tree of the region's destination points."""
    d = d_all[src_in]
    miss = ~dst_in[i_all[src_in]]
    if miss.any():
        d = d.copy()
        d[miss] = nn_distances(src[src_in][miss], tree(dst[dst_in]), workers)
    return d


def _chamfer_update(pred_clouds: list[np.ndarray], gt_clouds: list[np.ndarray],
                    tau: float = DEFAULT_TAU, workers: int = 1) -> FrameStats:
    """Per-frame Chamfer statistics of two lists of (N_t, 3) clouds (the functional form;
    the evaluator builds trees once and calls `chamfer_stats`)."""
    stats = FrameStats.zeros(len(pred_clouds), CHAMFER_STATS)
    for t, (p, g) in enumerate(zip(pred_clouds, gt_clouds, strict=True)):
        stats.add(t, chamfer_stats(p, tree(p), g, tree(g), tau, workers))
    return stats


def _chamfer_compute(stats: FrameStats) -> dict[str, np.ndarray]:
    """-> chamfer_l1, chamfer_l2, precision, recall, fscore: (T,) each, NaN where a
    frame has an empty cloud."""
    l1 = 0.5 * (safe_ratio(stats["pg_l1"], stats["n_pred"]) + safe_ratio(stats["gp_l1"], stats["n_gt"]))
    l2 = 0.5 * (safe_ratio(stats["pg_l2"], stats["n_pred"]) + safe_ratio(stats["gp_l2"], stats["n_gt"]))
    precision = safe_ratio(stats["pred_in"], stats["n_pred"])
    recall = safe_ratio(stats["gt_in"], stats["n_gt"])
    total = precision + recall
    fscore = np.where(total > 0, 2 * precision * recall / np.where(total > 0, total, 1.0), 0.0)
    fscore = np.where(np.isnan(total), np.nan, fscore)
    return {"chamfer_l1": l1, "chamfer_l2": l2, "precision": precision, "recall": recall,
            "fscore": fscore}


def depth_stats(z_pred: np.ndarray, z_gt: np.ndarray) -> dict[str, float]:
    """Additive depth statistics of paired per-pixel depths (N,), (N,), both > 0."""
    ratio = z_pred / z_gt
    return {"absrel_sum": float(np.abs(ratio - 1.0).sum()),
            "delta1_count": float(np.count_nonzero(np.maximum(ratio, 1.0 / ratio) < DELTA1)),
            "n": float(len(z_gt))}


def _depth_compute(stats: FrameStats) -> dict[str, np.ndarray]:
    return {"depth_absrel": safe_ratio(stats["absrel_sum"], stats["n"]),
            "depth_delta1": safe_ratio(stats["delta1_count"], stats["n"])}


def chamfer(pred: np.ndarray, gt: np.ndarray, tau: float = DEFAULT_TAU) -> dict[str, float]:
    """Chamfer L1/L2, precision, recall and F-score of one pair of (N, 3) clouds."""
    values = _chamfer_compute(_chamfer_update([pred], [gt], tau))
    return {k: float(v[0]) for k, v in values.items()}


def space_suffix(space: str) -> str:
    """The suffix of a metric measured in `space`: none for metres, `_k4d` otherwise."""
    return "" if space == SPACES[0] else f"_{space}"


class Chamfer(FrameMetric):
    """Chamfer L1/L2, precision, recall and F-score of prediction against ground truth."""

    group = "chamfer"
    stats = CHAMFER_STATS
    geometry = True
    outputs = (MetricInfo("chamfer_l1", higher_is_better=False),
               MetricInfo("chamfer_l2", higher_is_better=False),
               MetricInfo("precision", higher_is_better=True),
               MetricInfo("recall", higher_is_better=True),
               MetricInfo("fscore", higher_is_better=True))

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        return _chamfer_compute(stats)


class TemporalChamfer(FrameMetric):
    """The prediction's frame t against its frame t-1: how much its scene moved. No better
    direction: a static prediction scores 0; compare with the ground truth's (`_gt`)."""

    group = "temporal"
    stats = CHAMFER_STATS
    geometry = True
    whole_frame_only = True
    _kept = ("chamfer_l1", "chamfer_l2", "fscore")
    tail = ""
    outputs = tuple(MetricInfo(f"temporal_{name}", higher_is_better=None) for name in _kept)

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        values = _chamfer_compute(stats)
        return {f"temporal_{name}{self.tail}": values[name] for name in self._kept}


class TemporalChamferGT(TemporalChamfer):
    """The same of the ground truth: the motion that is really there (a reference)."""

    group = "temporal_gt"
    tail = "_gt"
    outputs = tuple(MetricInfo(f"temporal_{name}_gt", higher_is_better=None)
                    for name in TemporalChamfer._kept)


class Depth(FrameMetric):
    """Depth AbsRel and delta1 on pixels valid in both clips."""

    group = "depth"
    stats = DEPTH_STATS
    geometry = True
    outputs = (MetricInfo("depth_absrel", higher_is_better=False),
               MetricInfo("depth_delta1", higher_is_better=True))

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        return _depth_compute(stats)


class PointL1(FrameMetric):
    """Pointmap L1: the mean absolute difference of x, y and z between the predicted and the
    ground-truth point of the same pixel (metres; `_k4d`: each clip in its own Kinema4D
    normalisation), on pixels valid in both clips. Unlike Chamfer it holds a point to its
    pixel: an object drawn in the right place at the wrong depth, or its points left behind
    where it was, count."""

    group = "point"
    stats = POINT_STATS
    geometry = True
    outputs = (MetricInfo("point_l1", higher_is_better=False),)

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        return {"point_l1": safe_ratio(stats["l1_sum"], 3.0 * stats["n"])}
