"""Does the demo transformer underfit or overfit? Its training loss on episodes it trained on
beside the same loss on episodes it never saw, with the same draws.

The loss is the trainer's own (k4d_trainer.objective: flow matching on the change from frame
0's latent, the cells where the scene changed weighted `--changed-weight`), computed without
gradients for `--draws` noise draws of each of the first `--episodes` episodes of each split.
Draw k of episode i uses the same timestep and noise in both splits, so the two means differ
by the episodes alone. A gap near zero with a high loss says more steps (or a larger model)
is the lever; a training loss well under the unseen one says more data is. The demo
recipe's cascade split is the unseen one to use: the transformer never trained on it, and
it is drawn as the training split is (failures 0.1; validation has 0.25).

    .venv/bin/python benchmarks/demo_model/fit_gap.py --model .k4d/exp/model-cont/weights \
        --train .k4d/demo-model/data/train --unseen .k4d/demo-model/data/cascade

Prints the mean loss per split, overall and by sigma third, and one RESULT line (JSON).
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
from k4d_trainer.data import collate, open_source, select_episodes
from k4d_trainer.latents import SampleEncoder, sample_clip
from k4d_trainer.model import clip_of
from k4d_trainer.objective import flow_matching_loss, loss_weights, noise_batch, training_schedule

SIGMA_EDGES = (0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0 + 1e-6)  # the thirds the loss is split by


def split_losses(transformer, encoder: SampleEncoder, dataset, episode_ids: list[str], clip,
                 args, schedule, latent_target: str, motion_scale: float = 1.0
                 ) -> list[tuple[float, float]]:
    """(sigma, weighted loss) of every draw of every episode, draw k of episode i numbered
    i * draws + k whichever split it is."""
    _, sigmas_of = schedule
    timestep_sigma = dict(zip(schedule[0].tolist(), sigmas_of.tolist(), strict=True))
    out = []
    for i, episode_id in enumerate(episode_ids):
        sample = encoder.encode(sample_clip(dataset.open(episode_id), clip, encoder.tracks))
        batch = collate([sample] * args.draws)
        numbers = [i * args.draws + k for k in range(args.draws)]
        noised = noise_batch(batch, numbers, args.seed, schedule, 0.0,
                             transformer.mask_channels, latent_target,
                             motion_scale=motion_scale)
        with torch.no_grad():
            prediction = transformer(noised.model_input, noised.timestep, batch["image_embeds"],
                                     noised.arm_cond, return_dict=False)[0]
        weights = loss_weights(batch, args.changed_weight, 1.0)
        for k in range(args.draws):
            loss = flow_matching_loss(prediction[k:k + 1], noised.target[k:k + 1],
                                      weights[k:k + 1])
            out.append((timestep_sigma[float(noised.timestep[k])], float(loss)))
    return out


def summary(draws: list[tuple[float, float]]) -> dict:
    thirds = []
    for low, high in zip(SIGMA_EDGES[:-1], SIGMA_EDGES[1:], strict=True):
        losses = [loss for sigma, loss in draws if low <= sigma < high]
        thirds.append(round(sum(losses) / len(losses), 5) if losses else None)
    return {"loss": round(sum(loss for _, loss in draws) / len(draws), 5),
            "loss_by_sigma_third": thirds, "draws": len(draws)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a k4d-layout model directory")
    parser.add_argument("--train", required=True, help="the episodes it trained on")
    parser.add_argument("--unseen", required=True, help="episodes it never trained on")
    parser.add_argument("--episodes", type=int, default=16, help="the first N of each split")
    parser.add_argument("--draws", type=int, default=8, help="noise draws per episode")
    parser.add_argument("--changed-weight", type=float, default=4.0,
                        help="training.changed_loss_weight of the run")
    parser.add_argument("--shift", type=float, default=3.0, help="training.timestep_shift")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if min(args.episodes, args.draws) < 1 or args.changed_weight < 1:
        print(f"error: --episodes {args.episodes} and --draws {args.draws} must be >= 1, "
              f"--changed-weight {args.changed_weight} >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    components = checkpoints.load_model(args.model)
    transformer = components.transformer.eval()
    clip = clip_of(components)
    extra = components.info.extra
    encoder = SampleEncoder(components, tracks=samples_tracks(extra))
    schedule = training_schedule(args.shift)
    latent_target = latent_target_of(extra)
    result = {"model": args.model, "episodes": args.episodes, "draws_per_episode": args.draws,
              "sigma_thirds": [round(e, 3) for e in SIGMA_EDGES[1:-1]]}
    for name, uri in (("train", args.train), ("unseen", args.unseen)):
        dataset = open_source(DataSection(uri=uri), None)
        ids = select_episodes(dataset, DataSection(uri=uri, max_episodes=args.episodes), clip)
        if len(ids) < args.episodes:
            print(f"error: {uri} has {len(ids)} episodes, --episodes asks {args.episodes}",
                  file=sys.stderr)
            return 2
        result[name] = summary(split_losses(transformer, encoder, dataset, ids, clip, args,
                                            schedule, latent_target,
                                            motion_scale_of(extra)))
        print(f"{name}: loss {result[name]['loss']:.4f}, by sigma third "
              f"{result[name]['loss_by_sigma_third']} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    result["unseen_over_train"] = round(result["unseen"]["loss"] / result["train"]["loss"], 3)
    result["seconds"] = round(time.perf_counter() - started)
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
