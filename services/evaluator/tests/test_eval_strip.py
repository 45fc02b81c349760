"""strip.png is read by people: each row is labelled (and the error rows carry their colour
scale) in a left margin, and each column carries its frame index, so the picture reads
without docs/evaluation.md beside it."""

from __future__ import annotations

import numpy as np
from k4d_eval.clip import Clip
from k4d_eval.plots import strip
from PIL import Image

T, H, W = 9, 32, 48


def _clips(rng):
    gt = Clip(rgb=rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8),
              depth=np.full((T, H, W), 1.5, np.float32))
    pred = Clip(rgb=rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8),
                depth=np.full((T, H, W), 1.6, np.float32))
    return pred, gt


def test_strip_has_labelled_rows_and_frame_columns(tmp_path, rng):
    pred, gt = _clips(rng)
    width = 120
    image = np.asarray(Image.open(strip(tmp_path / "s.png", pred, gt, columns=6, width=width)).convert("L"))
    tile_h = round(H * width / W)
    assert image.shape[1] > 6 * width and image.shape[0] > 4 * tile_h  # a margin and a header
    margin = image[image.shape[0] - 4 * tile_h:, : image.shape[1] - 6 * width]
    header = image[: image.shape[0] - 4 * tile_h, image.shape[1] - 6 * width:]
    for r in range(4):  # text in the margin beside every row
        assert (margin[r * tile_h:(r + 1) * tile_h] < 128).any(), r
    for c in range(6):  # a frame index above every column
        assert (header[:, c * width:(c + 1) * width] < 128).any(), c
