"""Writes examples/demo_heldout/ (the demo model's held-out scene, issue 13) from one episode
of the held-out split that `make demo-model` generates (seed 9013, disjoint from the training
seed 1013): the first RGB frame, the camera and the joint actions, adapted to the demo
model's clip exactly as the trainer adapts episodes (k4d_trainer.clips: frames resampled
evenly with the first and last kept, the image resized to cover the clip).

    .venv/bin/python examples/make_heldout_scene.py [--data .k4d/demo-model/data/heldout] \
        [--episode ep000000] [--frames 13 --height 96 --width 144] [--out examples/demo_heldout]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=".k4d/demo-model/data/heldout")
    parser.add_argument("--episode", default="ep000000")
    parser.add_argument("--frames", type=int, default=13)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=144)
    parser.add_argument("--out", type=Path, default=Path("examples/demo_heldout"))
    args = parser.parse_args()

    from k4d.episodes import open_dataset
    from k4d_trainer.clips import ClipSpec, frame_indices, read_clip, scale_to_cover
    from PIL import Image

    dataset = open_dataset(args.data)
    episode = dataset.open(args.episode)
    meta = episode.meta
    clip = ClipSpec(args.frames, args.height, args.width)
    arrays = read_clip(episode, clip)
    args.out.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arrays["rgb"][0]).save(args.out / "scene.png")

    # Camera: scaled to cover the clip, then centre-cropped (as resize_crop does).
    camera = meta.camera.to_dict()
    scale = scale_to_cover(meta.height, meta.width, clip)
    new_h, new_w = round(meta.height * scale), round(meta.width * scale)
    top, left = (new_h - args.height) // 2, (new_w - args.width) // 2
    camera.update(width=args.width, height=args.height,
                  fx=camera["fx"] * new_w / meta.width, fy=camera["fy"] * new_h / meta.height,
                  cx=(camera["cx"] + 0.5) * new_w / meta.width - 0.5 - left,
                  cy=(camera["cy"] + 0.5) * new_h / meta.height - 0.5 - top)
    (args.out / "camera.json").write_text(json.dumps(camera, indent=2) + "\n")

    actions = dict(meta.actions)
    picks = frame_indices(meta.frames, args.frames)
    steps = np.asarray(actions["steps"], np.float64)
    duration = actions["dt"] * (meta.frames - 1)
    actions.update(steps=steps[picks].tolist(), num_frames=args.frames,
                   dt=duration / (args.frames - 1))
    (args.out / "actions.json").write_text(json.dumps(actions, indent=1) + "\n")
    (args.out / "episode.json").write_text(json.dumps({
        "dataset": "k4d datagen synthetic --seed 9013 (held-out split of make demo-model)",
        "episode_id": meta.episode_id, "task": meta.task, "task_kind": meta.task_kind,
        "success": meta.success, "source": meta.source,
        "clip": {"num_frames": args.frames, "height": args.height, "width": args.width}},
        indent=2) + "\n")
    print(f"wrote {args.out}: {meta.task!r} ({meta.task_kind}, success={meta.success})")


if __name__ == "__main__":
    main()
