"""A picture of rollouts a person can judge: for each episode, the ground truth and each
labelled prediction at a few frames, cropped around the task's objects and enlarged.

    .venv/bin/python benchmarks/demo_model/rollout_strip.py --data .k4d/splits/val7031g \
        --episodes ep000006 ep000010 --frames 0 4 8 10 12 \
        --prediction "round 11=/work/abl/val/ship/predictions" \
        --prediction "round 12=/work/abl/val/r12/predictions" --out strip.png

A prediction directory holds `<episode>/pointmap.npz` with `rgb` (T, H, W, 3) uint8 (the
layout `k4d simulate` and the ablation harness write).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def crop_box(object_ids: np.ndarray, half: int) -> tuple[int, int, int, int]:
    """(v0, v1, u0, u1): a square of 2 x half pixels around frame 0's objects 1 and 2 (the
    task's), inside the image."""
    H, W = object_ids.shape
    vv, uu = np.nonzero((object_ids == 1) | (object_ids == 2))
    if len(vv) == 0:
        vv, uu = np.array([H // 2]), np.array([W // 2])
    side = min(2 * half, H, W)
    v0 = int(np.clip(round((vv.min() + vv.max()) / 2) - side // 2, 0, H - side))
    u0 = int(np.clip(round((uu.min() + uu.max()) / 2) - side // 2, 0, W - side))
    return v0, v0 + side, u0, u0 + side


def episode_rows(truth: np.ndarray, predictions: list[np.ndarray], frames: list[int],
                 box: tuple[int, int, int, int], zoom: int) -> list[np.ndarray]:
    """One image row (frames side by side, enlarged) for the truth and each prediction."""
    v0, v1, u0, u1 = box
    rows = []
    for video in [truth, *predictions]:
        tiles = [np.kron(video[t, v0:v1, u0:u1], np.ones((zoom, zoom, 1), np.uint8))
                 for t in frames]
        gap = np.full((tiles[0].shape[0], 2, 3), 255, np.uint8)
        rows.append(np.concatenate([x for tile in tiles for x in (tile, gap)][:-1], axis=1))
    return rows


def main() -> None:
    from k4d.episodes import open_dataset
    from k4d_eval.inputs import load_episode
    from PIL import Image, ImageDraw

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--episodes", nargs="+", required=True)
    parser.add_argument("--frames", nargs="+", type=int, default=[0, 3, 6, 9, 12])
    parser.add_argument("--prediction", action="append", required=True,
                        help="LABEL=DIR of <episode>/pointmap.npz")
    parser.add_argument("--half", type=int, default=16, help="crop half-size, pixels")
    parser.add_argument("--zoom", type=int, default=5)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    labelled = [spec.partition("=")[::2] for spec in args.prediction]
    dataset = open_dataset(args.data)
    label_width, blocks, names = 150, [], []
    for episode_id in args.episodes:
        clip = load_episode(dataset, episode_id)
        predictions = [np.load(Path(where) / episode_id / "pointmap.npz")["rgb"]
                       for _, where in labelled]
        box = crop_box(clip.object_ids[0], args.half)
        rows = episode_rows(clip.rgb, predictions, args.frames, box, args.zoom)
        blocks.append(rows)
        task = str(clip.meta.get("task", ""))
        names.append([f"{episode_id}: truth", *[f"{label}" for label, _ in labelled]] +
                     [task])
    width = label_width + blocks[0][0].shape[1]
    row_height = blocks[0][0].shape[0]
    height = sum(len(rows) * (row_height + 2) + 16 for rows in blocks)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    y = 0
    for rows, labels in zip(blocks, names, strict=True):
        draw.text((4, y + 2), labels[-1], fill="black")
        y += 16
        for row, label in zip(rows, labels[:-1], strict=True):
            canvas.paste(Image.fromarray(row), (label_width, y))
            draw.text((4, y + row_height // 2 - 6), label, fill="black")
            y += row_height + 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(args.out)
    print(f"wrote {args.out} ({len(args.episodes)} episodes, frames {args.frames})")


if __name__ == "__main__":
    main()
