"""Seconds per step of the demo recipe's stages in fp32 and under bf16 autocast (the trainer's
`model.precision: bf16`, round 10 of issue 21), one thread, on this machine:

- VAE stage: encode + decode + backward of the recipe's batch (8 windows of 5 x 48 x 48);
- latent encoding: one 13 x 96 x 144 video through the VAE encoder (a cache entry is four);
- frame VAE encoding: the same video through `small-f4`'s per-frame VAE (the demo recipe's
  latent cache; a cache entry is two);
- refiner stage: forward + backward of the change refiner's U-Net on 8 frames at 96 x 144;
- transformer: forward + backward of the `small` transformer at batch 2 (one rank's share of
  the recipe's global batch of 4).

Each figure is the median of `--reps` after two warm-up steps; fp32 and bf16 alternate per
stage (A B A B), so load on the shared machine falls on both. Prints one JSON line per stage
with the ratio fp32 / bf16 (the speed-up), whether the CPU has AVX512-BF16, and whether the
trainer's `model.precision: bf16-if-native` picks bf16 here (k4d_trainer.parallel.native_bf16).

    .venv/bin/python benchmarks/trainer/bench_stage_precision.py [--reps 4] [--only vae]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time

import torch
from k4d_trainer.parallel import native_bf16


def _autocast(bf16: bool):
    return (torch.autocast("cpu", dtype=torch.bfloat16) if bf16
            else contextlib.nullcontext())


def stages():
    """name -> step(bf16: bool), each building its model once."""
    from diffusers import AutoencoderKLWan
    from k4d_model.frame_vae import FrameAutoencoder
    from k4d_model.model.configs import get_model_config, latent_shape
    from k4d_model.model.transformer import Kinema4DTransformer3DModel
    from k4d_model.refiner import ChangeRefiner, RefinerConfig

    config = get_model_config("small")
    torch.manual_seed(0)
    vae = AutoencoderKLWan(**config.vae).train()
    vae_opt = torch.optim.AdamW(vae.parameters(), lr=1e-4)
    windows = torch.rand(8, 3, 5, 48, 48) * 2 - 1

    def vae_step(bf16):
        with _autocast(bf16):
            recon = vae.decode(vae.encode(windows).latent_dist.sample()).sample
        torch.nn.functional.mse_loss(recon.float(), windows).backward()
        vae_opt.step()
        vae_opt.zero_grad(set_to_none=True)

    video = torch.rand(1, 3, config.num_frames, config.height, config.width) * 2 - 1

    def encode(bf16):
        with torch.no_grad(), _autocast(bf16):
            vae.encode(video).latent_dist.mode()

    frame_vae = FrameAutoencoder(**{k: v for k, v in get_model_config("small-f4").vae.items()
                                    if k != "class"}).eval()

    def frame_encode(bf16):
        with torch.no_grad(), _autocast(bf16):
            frame_vae.encode(video).latent_dist.mode()

    refiner = ChangeRefiner(RefinerConfig()).train()
    refiner_opt = torch.optim.AdamW(refiner.parameters(), lr=1e-4)
    frames = torch.rand(8, RefinerConfig().inputs, config.height, config.width)

    def refiner_step(bf16):
        with _autocast(bf16):
            out = refiner(frames)
        out.float().square().mean().backward()
        refiner_opt.step()
        refiner_opt.zero_grad(set_to_none=True)

    dit = Kinema4DTransformer3DModel(**config.transformer).train()
    dit_opt = torch.optim.AdamW(dit.parameters(), lr=1e-4)
    lf, lh, lw = latent_shape(config.num_frames, config.height, config.width)
    x = torch.randn(2, 36, lf, lh, 2 * lw)
    target = torch.randn(2, 16, lf, lh, 2 * lw)
    embeds = torch.randn(2, config.transformer["num_image_tokens"],
                         config.transformer["image_dim"])
    arm = torch.randn(2, 20, lf, lh, 2 * lw)

    def dit_step(bf16):
        with _autocast(bf16):
            out = dit(x, torch.full((2,), 500.0), embeds, arm, return_dict=False)[0]
        torch.nn.functional.mse_loss(out.float(), target).backward()
        dit_opt.step()
        dit_opt.zero_grad(set_to_none=True)

    return {"vae_step": vae_step, "encode_video": encode, "frame_vae_encode": frame_encode,
            "refiner_step": refiner_step,
            "transformer_step": dit_step}


def timed(step, bf16: bool) -> float:
    start = time.perf_counter()
    step(bf16)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--only", default="", help="substring of the stage names to run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    native = native_bf16(torch.device("cpu"))
    for name, step in stages().items():
        if args.only not in name:
            continue
        for bf16 in (False, True, False, True):  # warm-up, both ways
            step(bf16)
        times = {False: [], True: []}
        for _ in range(args.reps):
            for bf16 in (False, True):
                times[bf16].append(timed(step, bf16))
        fp32, bf16 = statistics.median(times[False]), statistics.median(times[True])
        print(json.dumps({"stage": name, "fp32_s": round(fp32, 3), "bf16_s": round(bf16, 3),
                          "speedup": round(fp32 / bf16, 2), "reps": args.reps,
                          "avx512_bf16": "avx512_bf16" in flags, "bf16_if_native": native,
                          "load_average": [round(v, 2) for v in os.getloadavg()]}),
              flush=True)


if __name__ == "__main__":
    main()
