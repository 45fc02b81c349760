"""The ceiling of drawing frames from a scene motion (k4d_model.tracks, `latent_target:
tracks`): frame 0 carried along the ground truth's tracks (k4d_trainer.object_flow), scored
by the evaluator against the truth beside the floor (frame 0 copied). With `--model`, the
tracks first go through that model's VAE (pointmap half, encoded and decoded as the
transformer's sample would be), and frame 0's points are the decoded ones (an RGB frame 0)
unless `--depth` gives the truth's.

    .venv/bin/python benchmarks/demo_model/tracks_ceiling.py --data .k4d/demo-model/data/val \
        [--model models/demo-small] [--depth] [--episodes 16]

With `--pairs STORE` (a tracks model's motion-decoder pairs, k4d_trainer.motion_decoder_stage,
sampled on `--data`'s episodes) it splits a tracks model's error into its motion and its
frame-0 geometry: frame 0 is carried along the model's sampled motion (`--motion sample`,
the default) or the truth's (`--motion truth`), from the model's sampled frame-0 points, or
from the truth's with `--depth`. The four rows of that 2 x 2 say which one a model must
fix. With the sampled motion (or `--model`'s VAE round trip of the truth's), the RESULT line
also gives how far it goes along the true motion where a surface moves more than 1 cm
(median; 1 is the whole way) and the median cosine of their angle.

Both rows take the robot's pixels from the truth (the robot is kinematics' in every model),
so they differ only where the scene is drawn. Prints one RESULT line (JSON): per row the
static region's PSNR and the changed / objects regions' RGB MSE against the floor's, their
parts where an object arrived, left or stayed, and the objects' point L1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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

# a surface moves when its track leaves frame 0's point by more than this (metres)
MOVING_M = 0.01
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


def sampled_tracks(store: Path, episode_id: str, clip: dict) -> np.ndarray:
    """A motion-decoder pair's sampled tracks (T, H, W, 3) in metres: its `decoded`, which
    is normalised as the generator normalises the rollout (from the robot's points)."""
    from k4d_trainer.cascade_stage import rollout_inputs

    path = store / f"{episode_id}.npz"
    if not path.is_file():
        raise SystemExit(f"tracks_ceiling: error: no pair {path} (sample the pairs on --data)")
    with np.load(path) as pair:
        decoded = pair["decoded"].astype(np.float32)
    return rollout_inputs(clip)[2].denormalise(decoded).astype(np.float32)


def motion_agreement(motion: np.ndarray, true_motion: np.ndarray, robot_at_first: np.ndarray,
                     moving_m: float = MOVING_M) -> tuple[np.ndarray, np.ndarray]:
    """On the pixels of frames t >= 1 whose true motion (T, H, W, 3, metres) exceeds
    `moving_m`, off frame 0's robot: how far `motion` goes along the true motion (its
    projection on it over its length: 1 is the whole way) and the cosine of their angle."""
    moving = (np.linalg.norm(true_motion[1:], axis=-1) > moving_m) & ~robot_at_first[None]
    drawn, true = motion[1:][moving].astype(np.float64), true_motion[1:][moving].astype(np.float64)
    along = (drawn * true).sum(-1)
    length = along / np.maximum((true * true).sum(-1), 1e-12)
    cosine = along / np.maximum(np.linalg.norm(drawn, axis=-1) * np.linalg.norm(true, axis=-1),
                                1e-12)
    return length, cosine


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
                        help="with --model or --pairs: frame 0's points are the truth's (RGB-D)")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--pairs", help="a tracks model's motion-decoder pairs store: its "
                        "sampled tracks of --data's episodes (not with --model)")
    parser.add_argument("--motion", choices=("sample", "truth"), default="sample",
                        help="with --pairs: carry frame 0 along the sampled motion or the truth's")
    args = parser.parse_args(argv)
    if args.pairs and args.model:
        parser.error("--pairs and --model are exclusive: the pairs are already decoded")
    dataset, source = open_dataset(args.data), open_source(DataSection(uri=args.data), None)
    ids = list(source.episode_ids)[: args.episodes]
    settings = Settings()
    ours, floors, lengths, cosines = [], [], [], []
    for episode_id in ids:
        gt = load_episode(dataset, episode_id)
        clip = ClipSpec(gt.frames, *gt.size)
        episode = source.open(episode_id)
        tracks = truth = episode_tracks(episode, clip)
        arrays = read_clip(episode, clip)
        if args.model:
            tracks = through_vae(args.model, arrays, tracks)
        first = gt.pointmap[0] if (args.depth or not args.model) else tracks[0]
        if args.pairs:
            sampled = sampled_tracks(Path(args.pairs), episode_id, arrays)
            first = gt.pointmap[0] if args.depth else sampled[0]
            motion = sampled - sampled[:1] if args.motion == "sample" else tracks - tracks[:1]
            tracks = first[None] + motion
        if args.model or (args.pairs and args.motion == "sample"):
            length, cosine = motion_agreement(tracks - tracks[:1], truth - truth[:1],
                                              arrays["robot_mask"][0])
            lengths.append(length)
            cosines.append(cosine)
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
              "pairs": args.pairs, "motion": args.motion if args.pairs else "truth",
              **figures(report)}
    if lengths:
        result["motion_length_median"] = float(np.median(np.concatenate(lengths)))
        result["motion_cosine_median"] = float(np.median(np.concatenate(cosines)))
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
