"""Metrics as sufficient statistics (torchmetrics style, STYLE.md).

Every metric's `_update` returns a `FrameStats`: named (T,) float64 arrays of ADDITIVE
per-frame statistics (sums and counts). `_compute` reduces them to per-frame values; an
episode or a whole evaluation is the mean over frames that have a value (the paper's "per
frame, then the mean"). Stats of several episodes combine by concatenating frames
(reduction "cat"), so workers and resumed runs merge without special code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
