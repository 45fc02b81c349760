"""Where does the demo transformer's error lie? Its x0 prediction's error split by the
latent's half (RGB | pointmap), frame 0 against later frames, and, on later frames, cells
where the scene stayed against cells where it changed, each beside predicting zero.

For each of the first `--episodes` episodes of `--data`, the clean sample is the model's own
(its latent target and motion scale), noised to each noise level (`--sigmas`; default 1 and
the model's own sampler's last query, 0.30 for the demo's 8 UniPC steps at shift 3) with one
seeded draw; the transformer predicts x0 = x_t - sigma v (k4d_trainer.progress.predict_x0 and
x0_region_errors, which the trainer's progress line uses too). What it predicts at the last
query the sample keeps, so the error there is what a still surface carries into the decoded
sample. A ratio over 1 on still cells means the transformer
adds motion (or colour change) where there is none: with a tracks target, the rendering
then moves still objects. Errors are in the sample's own units (a scaled motion stays
scaled: divide by motion_scale squared to compare with an unscaled one).

    .venv/bin/python benchmarks/demo_model/x0_regions.py --model .k4d/exp/m-tracks-b/weights \
        --data .k4d/demo-model/data/train --episodes 6

Prints one line per region and one RESULT line (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from k4d_model import checkpoints
from k4d_model.latent_target import latent_target_of, motion_scale_of, samples_tracks
from k4d_trainer.config import DataSection
from k4d_trainer.data import open_source, select_episodes
from k4d_trainer.latents import SampleEncoder, sample_clip
from k4d_trainer.model import clip_of
from k4d_trainer.progress import last_query_sigma, predict_x0, x0_region_errors
from k4d_trainer.tool_condition import TOOL_KEY, clip_tool_features, episode_tool


def region_totals(transformer, samples: list[dict[str, torch.Tensor]], latent_target: str,
                  motion_scale: float, sigma: float, seed: int, draws: int = 1
                  ) -> dict[str, list[float]]:
    """{half/region: [summed squared x0 error, summed squared x, cells]} over the samples,
    sample k noised with seed + k; with `draws` > 1 the x0 is the mean of that many
    predictions from independent draws (seed + k + 1000 d)."""
    totals: dict[str, list[float]] = {}
    for k, sample in enumerate(samples):
        predictions = []
        for d in range(draws):
            x0, x = predict_x0(transformer, sample, seed + k + 1000 * d, latent_target, sigma,
                               None, torch.device("cpu"), motion_scale)
            predictions.append(x0)
        x0 = torch.stack(predictions).mean(dim=0)
        for key, figures in x0_region_errors(x0, x, sample["change"]).items():
            totals[key] = [a + b for a, b in zip(totals.get(key, [0.0] * 3), figures,
                                                 strict=True)]
    return totals


def _sigmas(text: str) -> list[float]:
    """`--sigmas`: comma-separated noise levels in (0, 1]."""
    try:
        sigmas = [float(s) for s in text.split(",")]
    except ValueError:
        sigmas = []
    if not sigmas or not all(0 < s <= 1 for s in sigmas):
        raise argparse.ArgumentTypeError(f"{text!r}: numbers in (0, 1], comma-separated")
    return sigmas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a k4d-layout model directory")
    parser.add_argument("--data", required=True, help="the episodes to measure on")
    parser.add_argument("--episodes", type=int, default=6, help="the first N of --data")
    parser.add_argument("--sigmas", type=_sigmas, default=None,
                        help="comma-separated noise levels (default: 1 and the model's "
                             "sampler's last query)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=1,
                        help="average the x0 of this many noise draws per episode: the mean "
                             "prediction, without the part of the error that follows the "
                             "draw (at sigma 1, reproducing the noise it was given)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.draws < 1:
        print(f"error: --episodes {args.episodes} and --draws {args.draws} must be >= 1",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    components = checkpoints.load_model(args.model)
    transformer = components.transformer.eval()
    wanted = args.sigmas or [1.0, last_query_sigma(components.scheduler,
                                                   components.info.num_inference_steps)]
    extra = components.info.extra
    latent_target, motion_scale = latent_target_of(extra), motion_scale_of(extra)
    encoder = SampleEncoder(components, tracks=samples_tracks(extra))
    clip = clip_of(components)
    dataset = open_source(DataSection(uri=args.data), None)
    ids = select_episodes(dataset, DataSection(uri=args.data, max_episodes=args.episodes), clip)
    if len(ids) < args.episodes:
        print(f"error: {args.data} has {len(ids)} episodes, --episodes asks {args.episodes}",
              file=sys.stderr)
        return 2
    samples = []
    for episode_id in ids:
        episode = dataset.open(episode_id)
        arrays = sample_clip(episode, clip, encoder.tracks)
        sample = encoder.encode(arrays)
        if encoder.pipe.reads_tool:  # a model with a tool condition reads the gripper
            sample[TOOL_KEY] = clip_tool_features(
                episode_tool(episode, clip), clip, encoder.pipe.temporal_stride,
                encoder.pipe.tool_features, episode, arrays)
        samples.append(sample)
    result = {"model": args.model, "data": args.data, "episodes": args.episodes,
              "draws": args.draws, "latent_target": latent_target, "motion_scale": motion_scale,
              "sigmas": {}}
    for sigma in wanted:
        rows = {}
        totals = region_totals(transformer, samples, latent_target, motion_scale, sigma,
                               args.seed, args.draws)
        for key, (error, zero, cells) in totals.items():
            if cells:
                rows[key] = {"x0_error": round(error / cells, 6), "zero": round(zero / cells, 6),
                             "ratio": round(error / zero, 3) if zero > 0 else None}
                print(f"sigma {sigma:.3f} {key:26s} x0 error {error / cells:.5f}  zero "
                      f"{zero / cells:.5f}  ratio {rows[key]['ratio']}", flush=True)
        result["sigmas"][f"{sigma:.3f}"] = rows
    result["seconds"] = round(time.perf_counter() - started)
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
