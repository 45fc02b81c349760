"""Where the demo recipe's transformer step goes on a CPU, and what two speed levers give.

The step is `small-f4`'s forward + backward + AdamW at one rank's batch (2 clips of
13 x 96 x 144: 1404 tokens each), one torch thread, in the dtype the trainer picks here
(`model.precision: bf16-if-native`: bf16 autocast on AVX512-BF16/AMX, else fp32):

- `share`: the profiler's split of one step: the attention kernels (scaled dot product),
  the matrix products, the rest;
- three ways to run the same step, alternated A B C A B C so that load on a shared machine
  falls on each: eager with the CPU flash-attention kernel (what `k4d train` runs), eager
  with the math attention (SDPBackend.MATH: one matrix product per head, softmax apart),
  and each transformer block under `torch.compile` (torchtitan's per-block compile);
  the first compiled step (the compile) is reported apart.

Prints one JSON line per figure, with each variant's median over `--reps` and its ratio to
eager.

    .venv/bin/python benchmarks/demo_model/bench_transformer_step.py [--reps 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time

import torch


def build(compiled: bool):
    """One model, its optimizer and the step; `compiled` wraps each block in torch.compile."""
    from k4d_generator.backends.onnx_export import example_inputs
    from k4d_model.model.configs import get_model_config
    from k4d_model.model.transformer import Kinema4DTransformer3DModel
    from k4d_trainer.parallel import native_bf16

    config = get_model_config("small-f4")
    torch.manual_seed(0)
    model = Kinema4DTransformer3DModel(**config.transformer).train()
    if compiled:
        for index, block in enumerate(model.blocks):
            model.blocks[index] = torch.compile(block)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    frames = config.num_frames
    height, width = config.height // 4, config.width // 4  # the per-frame 4x VAE's latents
    x, timestep, embeds, arm, _ = example_inputs(model, frames, height, width, batch=2)
    target = torch.randn(2, config.transformer["out_channels"], frames, height, 2 * width)
    bf16 = native_bf16(torch.device("cpu"))

    def step():
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 \
            else contextlib.nullcontext()
        with autocast:
            out = model(x, timestep, embeds, arm, return_dict=False)[0]
        torch.nn.functional.mse_loss(out.float(), target).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, bf16


def attention(math: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()


def timed(step, math: bool = False) -> float:
    with attention(math):
        started = time.perf_counter()
        step()
        return time.perf_counter() - started


def share(step) -> dict:
    """The profiler's self CPU time of two steps, split by kind of operator."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        step()
    totals = {"attention": 0.0, "matmul": 0.0, "other": 0.0}
    for event in prof.key_averages():
        kind = "attention" if "scaled_dot_product" in event.key else \
            "matmul" if event.key in ("aten::mm", "aten::addmm", "aten::bmm") else "other"
        totals[kind] += event.self_cpu_time_total
    whole = sum(totals.values())
    return {kind: round(value / whole, 3) for kind, value in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = [round(v, 2) for v in os.getloadavg()]
    eager, bf16 = build(compiled=False)
    compiled, _ = build(compiled=True)
    for _ in range(2):
        eager()
    compile_s = timed(compiled)
    compiled()
    print(json.dumps({"figure": "share", "dtype": "bf16" if bf16 else "fp32",
                      **share(eager)}), flush=True)
    times = {"eager": [], "math_attention": [], "compiled_blocks": []}
    for _ in range(args.reps):
        times["eager"].append(timed(eager))
        times["math_attention"].append(timed(eager, math=True))
        times["compiled_blocks"].append(timed(compiled))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(json.dumps({"figure": name, "step_s": round(median, 3),
                          "eager_over_this": round(medians["eager"] / median, 2),
                          "reps": args.reps, "dtype": "bf16" if bf16 else "fp32",
                          **({"first_step_s": round(compile_s, 1)}
                             if name == "compiled_blocks" else {}),
                          "load_average": load}), flush=True)


if __name__ == "__main__":
    main()
