"""Cost of the from-scratch recipe per candidate clip size on this machine, to choose the
demo model's clip and size (issue 13): seconds per optimizer step (batch 2) of

- the VAE stage (`AutoencoderKLWan` of the size: encode + decode + backward on RGB videos),
- the transformer stage (`Kinema4DTransformer3DModel` forward + backward on random latents
  of the clip's latent shape, exactly the shapes `k4d train` feeds it),

for the generator's `tiny` (5x32x48) and `small` (13x96x144) sizes and `small`'s blocks at
17x128x192 (the issue's example clip; arm grid recomputed for the clip). Prints one JSON
line per candidate with samples/s; the load average is printed with them because the
machine is shared.

    .venv/bin/python benchmarks/demo_model/bench_recipe.py [--reps 3] [--threads 2] \
        [--only small] [--no-vae]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import torch


def candidates():
    from k4d_model.model.configs import _transformer_kwargs, get_model_config

    tiny, small = get_model_config("tiny"), get_model_config("small")
    yield "tiny 5x32x48", tiny
    yield "small 13x96x144", small
    t = small.transformer
    big = _transformer_kwargs(heads=t["num_attention_heads"], head_dim=t["attention_head_dim"],
                              layers=t["num_layers"], ffn=t["ffn_dim"], text_dim=t["text_dim"],
                              image_dim=t["image_dim"], freq_dim=t["freq_dim"], num_frames=17,
                              height=128, width=192, arm_patch_size=t["arm_patch_size"],
                              num_image_tokens=t["num_image_tokens"])
    yield "small blocks 17x128x192", dataclasses.replace(small, transformer=big, num_frames=17,
                                                         height=128, width=192)


def time_it(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name, config, reps: int, batch: int, vae_too: bool = True) -> dict:
    from diffusers import AutoencoderKLWan
    from k4d_model.model.configs import latent_shape
    from k4d_model.model.transformer import Kinema4DTransformer3DModel

    torch.manual_seed(0)
    f, h, w = config.num_frames, config.height, config.width
    vae = AutoencoderKLWan(**config.vae).train()
    video = torch.rand(batch, 3, f, h, w) * 2 - 1
    vae_opt = torch.optim.AdamW(vae.parameters(), lr=1e-4)

    def vae_step():
        post = vae.encode(video).latent_dist
        loss = torch.nn.functional.mse_loss(vae.decode(post.sample()).sample, video)
        loss.backward()
        vae_opt.step()
        vae_opt.zero_grad(set_to_none=True)

    model = Kinema4DTransformer3DModel(**config.transformer).train()
    lf, lh, lw = latent_shape(f, h, w)
    x = torch.randn(batch, 36, lf, lh, 2 * lw)
    target = torch.randn(batch, 16, lf, lh, 2 * lw)
    tokens = config.transformer["num_image_tokens"]
    embeds = torch.randn(batch, tokens, config.transformer["image_dim"])
    arm = torch.randn(batch, 20, lf, lh, 2 * lw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def dit_step():
        out = model(x, torch.full((batch,), 500.0), embeds, arm, return_dict=False)[0]
        torch.nn.functional.mse_loss(out, target).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    vae_s = time_it(vae_step, reps) if vae_too else float("nan")
    dit_s = time_it(dit_step, reps)
    return {"candidate": name, "batch": batch,
            "vae_step_s": round(vae_s, 3) if vae_too else None,
            "vae_samples_per_s": round(batch / vae_s, 3) if vae_too else None,
            "dit_step_s": round(dit_s, 3),
            "dit_samples_per_s": round(batch / dit_s, 3),
            "dit_params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
            "vae_params_m": round(sum(p.numel() for p in vae.parameters()) / 1e6, 2),
            "tokens": lf * (lh // 2) * (lw // 2) * 2,
            "load_average": [round(v, 2) for v in os.getloadavg()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="substring of the candidate names to run")
    parser.add_argument("--no-vae", action="store_true", help="time the transformer only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, config in candidates():
        if args.only and args.only not in name:
            continue
        row = measure(name, config, args.reps, args.batch, vae_too=not args.no_vae)
        print(json.dumps({**row, "threads": args.threads}), flush=True)


if __name__ == "__main__":
    main()
