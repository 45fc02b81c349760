"""The ceiling of drawing frames from a scene motion (k4d_model.tracks, `latent_target:
tracks`): frame 0 carried along the ground truth's tracks (k4d_trainer.object_flow), scored
by the evaluator against the truth beside the floor (frame 0 copied). With `--model`, the
tracks first go through that model's VAE (pointmap half, encoded and decoded as the
transformer's sample would be), and frame 0's points are the decoded ones (an RGB frame 0)
unless `--depth` gives the truth's.

    .venv/bin/python benchmarks/demo_model/tracks_ceiling.py --data .k4d/demo-model/data/val \
        [--model models/demo-small] [--depth] [--episodes 16]

Both rows take the robot's pixels from the truth (the robot is kinematics' in every model),
so they differ only where the scene is drawn. Prints one RESULT line (JSON): per row the
static region's PSNR and the changed / objects regions' RGB MSE against the floor's, their
parts where an object arrived, left or stayed, and the objects' point L1.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from k4d.camera import fit_pinhole
from k4d.episodes import open_dataset
from k4d_eval.clip import Clip
from k4d_eval.eval_runs import report_settings
from k4d_eval.evaluate import Settings, evaluate_clips
from k4d_eval.inputs import load_episode
from k4d_eval.report import build_report
from k4d_model.tracks import render_tracks
from k4d_trainer.clips import ClipSpec, read_clip
from k4d_trainer.config import DataSection
from k4d_trainer.data import open_source
from k4d_trainer.object_flow import episode_tracks

REGIONS = ("changed", "objects", "objects_arrived", "objects_left", "objects_stayed")


def through_vae(model_dir: str, clip: dict, tracks: np.ndarray) -> np.ndarray:
    """The tracks (T, H, W, 3) metres after the model's VAE, encoded as the trainer's latent
    cache encodes them and decoded as the generator decodes its sample."""
    import torch
    from k4d_model.checkpoints import load_model
    from k4d_trainer.latents import SampleEncoder, clip_normalisation

    global _ENCODER
    if _ENCODER is None:
        _ENCODER = SampleEncoder(load_model(model_dir), tracks=True)
    latents = _ENCODER.encode({**clip, "tracks": tracks})["latents"]
    with torch.no_grad():
        _, decoded = _ENCODER.pipe.decode_float(latents[None])
    return clip_normalisation(clip).denormalise(decoded).astype(np.float32)


_ENCODER = None


def rendered_clip(gt: Clip, image_points: np.ndarray, tracks: np.ndarray, robot_mask, camera
                  ) -> Clip:
    sources = (image_points[..., 2] > 0) & ~robot_mask[0]
    rgb, points = render_tracks(gt.rgb[0], image_points, tracks - tracks[:1], sources, camera)
    return _with_robot(gt, rgb, points)


def floor_clip(gt: Clip, first_points: np.ndarray) -> Clip:
    frames = gt.frames
    rgb = np.repeat(gt.rgb[:1].astype(np.float32), frames, 0)
    points = np.repeat(first_points[None], frames, 0)
    return _with_robot(gt, rgb, points)


def _with_robot(gt: Clip, rgb: np.ndarray, points: np.ndarray) -> Clip:
    robot = gt.robot_mask[..., None]
    rgb = np.where(robot, gt.rgb, np.round(np.clip(rgb, 0, 255))).astype(np.uint8)
    points = np.where(robot, gt.pointmap, points).astype(np.float32)
    valid = points[..., 2] > 0
    # the camera does not move in these episodes: each frame's depth is its z
    return Clip(rgb=rgb, pointmap=points, valid=valid, depth=np.where(valid, points[..., 2], 0.0))


def figures(report: dict) -> dict:
    g, b = report["regions_generated"], report["baseline"]["regions_generated"]
    out = {"static_psnr_db": g["static"]["psnr"],
           "objects_point_l1_cm": 100.0 * g["objects"]["point_l1"]}
    out |= {f"{k}_x_floor": g[k]["mse"] / b[k]["mse"] for k in REGIONS if k in g}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a k4d dataset of synthetic episodes")
    parser.add_argument("--model", help="a model directory whose VAE the tracks go through")
    parser.add_argument("--depth", action="store_true",
                        help="with --model: frame 0's points are the truth's (RGB-D)")
    parser.add_argument("--episodes", type=int, default=16)
    args = parser.parse_args(argv)
    dataset, source = open_dataset(args.data), open_source(DataSection(uri=args.data), None)
    ids = list(source.episode_ids)[: args.episodes]
    settings = Settings()
    ours, floors = [], []
    for episode_id in ids:
        gt = load_episode(dataset, episode_id)
        clip = ClipSpec(gt.frames, *gt.size)
        episode = source.open(episode_id)
        tracks = episode_tracks(episode, clip)
        arrays = read_clip(episode, clip)
        if args.model:
            tracks = through_vae(args.model, arrays, tracks)
        first = gt.pointmap[0] if (args.depth or not args.model) else tracks[0]
        camera = fit_pinhole(arrays["robot_pointmap"], arrays["robot_mask"])
        if camera is None:
            print(f"error: {episode_id}: no robot pixels to fit the camera to", file=sys.stderr)
            return 2
        for clips, pred in ((ours, rendered_clip(gt, first, tracks, gt.robot_mask, camera)),
                            (floors, floor_clip(gt, first))):
            clips.append(evaluate_clips(pred, gt, settings, episode_id=episode_id,
                                        condition_robot_mask=gt.robot_mask, synthetic=True))
    report = build_report(ours, report_settings(settings, None), baseline=floors)
    result = {"episodes": len(ids), "model": args.model, "depth": bool(args.depth),
              **figures(report)}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
