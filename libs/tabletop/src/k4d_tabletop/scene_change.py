"""Where a scene changed from its first frame: the one rule that the evaluator's `changed`
and `static` regions and the trainer's change-weighted loss share (issue 21).

A pixel of frame t changed when its colour differs from frame 0's by more than RGB_CHANGE
levels in any channel, or its depth by more than DEPTH_CHANGE_M where both depths are
known. Which of those pixels belong to the robot is the caller's business: the regions
leave the robot (now and in frame 0) out.
"""

from __future__ import annotations

import numpy as np

RGB_CHANGE = 25          # levels (0-255) in any channel
DEPTH_CHANGE_M = 0.01    # metres, where frame t's and frame 0's depths are both known


def changed_from_first(rgb: np.ndarray, depth: np.ndarray | None = None) -> np.ndarray:
    """rgb (T, H, W, 3) uint8, depth (T, H, W) metres with 0 where unknown -> (T, H, W) bool."""
    rgb = np.asarray(rgb)
    diff = np.abs(rgb.astype(np.int16) - rgb[:1].astype(np.int16)).max(axis=-1) > RGB_CHANGE
    if depth is not None:
        depth = np.asarray(depth)
        both = (depth > 0) & (depth[:1] > 0)
        diff |= both & (np.abs(depth - depth[:1]) > DEPTH_CHANGE_M)
    return diff
