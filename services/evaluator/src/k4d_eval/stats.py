"""Metrics as sufficient statistics (torchmetrics style, STYLE.md).

Every metric's `_update` returns a `FrameStats`: named (T,) float64 arrays of ADDITIVE
per-frame statistics (sums and counts). `_compute` reduces them to per-frame values; an
episode or a whole evaluation is the mean over frames that have a value (the paper's "per
frame, then the mean"). Stats of several episodes combine by concatenating frames
(reduction "cat"), so workers and resumed runs merge without special code.

`FrameMetric` is the metric object over one such group of statistics (torchmetrics'
`Metric`: the state fields as class data, `compute`, and the metadata of what it reports,
`MetricInfo` with `higher_is_better`); `k4d_eval.metric_registry` lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np


@dataclass
class FrameStats:
    """Additive statistics of one metric group: name -> (T,) float64."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def zeros(cls, frames: int, names) -> FrameStats:
        return cls({name: np.zeros(frames) for name in names})

    @property
    def frames(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def add(self, t: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.arrays[name][t] += value

    def cat(self, other: FrameStats) -> FrameStats:
        """Frames of self followed by frames of other (the cross-episode reduction)."""
        if not self.arrays:
            return FrameStats({k: v.copy() for k, v in other.arrays.items()})
        if set(self.arrays) != set(other.arrays):
            raise ValueError(f"cannot merge stats {sorted(self.arrays)} and {sorted(other.arrays)}")
        return FrameStats({k: np.concatenate([v, other.arrays[k]]) for k, v in self.arrays.items()})

    def to_json(self) -> dict[str, list[float]]:
        return {k: v.tolist() for k, v in self.arrays.items()}

    @classmethod
    def from_json(cls, data: dict[str, list[float]]) -> FrameStats:
        return cls({k: np.asarray(v, dtype=np.float64) for k, v in data.items()})


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den per frame, NaN where den == 0 (a frame with nothing to measure)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def frame_mean(values: np.ndarray) -> float | None:
    """Mean over frames that have a value; None when no frame has one."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else None


@dataclass(frozen=True)
class MetricInfo:
    """One reported metric: its key in report.json, its direction and its summary.md format.
    higher_is_better None: the value has no better direction (the temporal Chamfer is how
    much the scene moved between frames: compare it with the ground truth's own, `_gt`)."""

    name: str
    higher_is_better: bool | None
    fmt: str = ".4f"


class FrameMetric:
    """A metric over one group of additive per-frame statistics (torchmetrics' `Metric`).

    Class data says what it keeps and reports:
      group: the EpisodeResult group key; a geometry metric keeps one group per space,
        `<group>_<space>` (k4d_eval.geometry.SPACES), and names its outputs with the
        space's suffix (`chamfer_l1`, `chamfer_l1_k4d`);
      stats: the state fields (FrameStats names), every one additive, reduction "cat";
      outputs: what `compute` returns, in report order;
      whole_frame_only: kept for the whole frame only, not per region.
    The per-frame `update` functions stay beside each metric (video_metrics, geometry):
    the evaluator shares their expensive parts (one SSIM map, one KD-tree search) across
    regions and spaces, which one `update` per metric object could not."""

    group: ClassVar[str]
    stats: ClassVar[tuple[str, ...]]
    outputs: ClassVar[tuple[MetricInfo, ...]]
    geometry: ClassVar[bool] = False
    whole_frame_only: ClassVar[bool] = False

    def compute(self, stats: FrameStats) -> dict[str, np.ndarray]:
        """FrameStats of this group -> output name -> (T,) per-frame values (NaN: none)."""
        raise NotImplementedError

    def values(self, stats: FrameStats, suffix: str = "") -> dict[str, np.ndarray]:
        """`compute` under the names the outputs are reported with (`suffix`: the space's)."""
        return {f"{name}{suffix}": v for name, v in self.compute(stats).items()}

    @classmethod
    def group_key(cls, space: str | None = None) -> str:
        return cls.group if space is None else f"{cls.group}_{space}"

    @classmethod
    def reported(cls, suffix: str = "") -> tuple[MetricInfo, ...]:
        """The outputs under the names they are reported with (`suffix`: the space's)."""
        return tuple(replace(info, name=f"{info.name}{suffix}") for info in cls.outputs)
