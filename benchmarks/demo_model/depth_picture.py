"""Frame 0's depth of held-out rollouts against the truth, as a picture a person can judge.

    python benchmarks/demo_model/depth_picture.py --data .k4d/demo-model/data/heldout \
        --run "round 5=.k4d/abl-e1g1/shipped/predictions" \
        --run "round 6=.k4d/abl-e1g2/planes/predictions" \
        --episodes ep000000 ep000004 ep000009 --out models/demo-small/eval/depth.png

One row per episode: the given image, the true depth, then per run its depth and |error| /
depth (0-30 %), with the run's whole-frame AbsRel of frame 0 in the column title. Depths
share one colour scale per row (turbo, near = blue); pixels without a true depth are black.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def _coloured(values: np.ndarray, low: float, high: float, cmap: str, known: np.ndarray
              ) -> np.ndarray:
    import matplotlib

    scaled = np.clip((values - low) / max(high - low, 1e-9), 0.0, 1.0)
    rgb = (matplotlib.colormaps[cmap](scaled)[..., :3] * 255).astype(np.uint8)
    return np.where(known[..., None], rgb, 0).astype(np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="held-out dataset URI (ground truth)")
    parser.add_argument("--run", action="append", required=True,
                        help="LABEL=DIR of predictions/<episode>/pointmap.npz")
    parser.add_argument("--episodes", nargs="+", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--scale", type=int, default=2, help="pixel upscaling")
    args = parser.parse_args()

    from k4d.episodes import open_dataset
    from PIL import Image, ImageDraw

    dataset = open_dataset(args.data)
    runs = [spec.split("=", 1) for spec in args.run]
    rows, titles = [], ["given image", "true depth"]
    for label, _ in runs:
        titles += [label, f"{label}: |error| / depth (0-30 %)"]
    for episode_id in args.episodes:
        episode = dataset.open(episode_id)
        truth = np.asarray(episode["pointmap"][0], np.float32)[..., 2]
        known = truth > 0
        low, high = np.percentile(truth[known], [1, 99])
        tiles = [np.asarray(episode["rgb"][0], np.uint8),
                 _coloured(truth, low, high, "turbo", known)]
        for _label, folder in runs:
            with np.load(Path(folder) / episode_id / "pointmap.npz") as npz:
                depth = npz["pointmap"][0][..., 2].astype(np.float32)
            error = np.abs(depth - truth) / np.where(known, truth, 1.0)
            tiles += [_coloured(depth, low, high, "turbo", depth > 0),
                      _coloured(error, 0.0, 0.3, "magma", known)]
        rows.append((episode_id, np.concatenate(tiles, axis=1)))
    H, W = rows[0][1].shape[0], rows[0][1].shape[1] // len(titles)
    s, left, top = args.scale, 90, 18
    canvas = Image.new("RGB", (left + W * s * len(titles), top + H * s * len(rows)), "white")
    draw = ImageDraw.Draw(canvas)
    for i, title in enumerate(titles):
        draw.text((left + i * W * s + 4, 3), title, fill="black")
    for r, (episode_id, row) in enumerate(rows):
        tile = Image.fromarray(row).resize((row.shape[1] * s, H * s), Image.NEAREST)
        canvas.paste(tile, (left, top + r * H * s))
        draw.text((4, top + r * H * s + H * s // 2), episode_id, fill="black")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
