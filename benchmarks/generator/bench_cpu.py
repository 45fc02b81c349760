"""CPU benchmarks of the generator, each figure next to its anchor measured in the same run.

1. Per-step denoiser latency, torch eager fp32 vs ONNX Runtime (CPU EP), on `tiny` and
   `small` (random weights; latency does not depend on the values). Anchor: torch.
2. One-pass vs two-pass (batched) guidance per step and per full sample. Anchor: two-pass
   (what the official release runs). Expect ~2x.
3. Peak resident memory of a full one-pass and two-pass sample per config (each in a fresh
   subprocess, ru_maxrss), next to the pipeline's own memory estimate.

    .venv/bin/python benchmarks/generator/bench_cpu.py [--configs tiny small] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch


def _build(config_name: str):
    from k4d_generator.checkpoints import build_components
    from k4d_generator.model.configs import get_model_config

    config = get_model_config(config_name)
    components, _ = build_components(config, seed=0)
    return config, components


def _latent_grid(config):
    from k4d_generator.model.configs import latent_shape

    return latent_shape(config.num_frames, config.height, config.width)


def _time_per_call(fn, inputs, repeats: int) -> float:
    """Median seconds per call after two warm-up calls."""
    for _ in range(2):
        fn(*inputs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_backends(config_name: str, repeats: int, threads: int) -> dict:
    from k4d_generator.backends import create_backend
    from k4d_generator.backends.onnx_export import example_inputs

    config, components = _build(config_name)
    lf, lh, lw = _latent_grid(config)
    inputs = example_inputs(components.transformer, lf, lh, lw, batch=1)
    torch_backend = create_backend("torch", components.transformer)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        onnx_backend = create_backend("onnx", components.transformer, cache_dir=cache,
                                      model_id=config_name, threads=threads)
        onnx_backend(*inputs)  # exports on first use
        export_s = time.perf_counter() - start
        rel_err = float((onnx_backend(*inputs) - torch_backend(*inputs)).abs().max()
                        / torch_backend(*inputs).abs().max())
        t_torch = _time_per_call(torch_backend, inputs, repeats)
        t_onnx = _time_per_call(onnx_backend, inputs, repeats)
    tokens = lf * (lh // 2) * (2 * lw // 2)
    return {"config": config_name, "tokens": tokens, "torch_ms": 1e3 * t_torch,
            "onnx_ms": 1e3 * t_onnx, "speedup_onnx_vs_torch": t_torch / t_onnx,
            "onnx_rel_err": rel_err, "export_s": export_s}


def bench_guidance(config_name: str, repeats: int) -> dict:
    from k4d_generator.backends import create_backend
    from k4d_generator.backends.onnx_export import example_inputs
    from k4d_generator.pipeline import Kinema4DPipeline

    config, components = _build(config_name)
    lf, lh, lw = _latent_grid(config)
    backend = create_backend("torch", components.transformer)
    one = example_inputs(components.transformer, lf, lh, lw, batch=1)
    two = tuple(x.repeat(2, *([1] * (x.ndim - 1))) for x in one)
    t_one = _time_per_call(backend, one, repeats)
    t_two = _time_per_call(backend, two, repeats)

    pipe = Kinema4DPipeline(components, backend)
    image, robot = _synthetic_inputs(config)
    steps = config.num_inference_steps
    sample = {}
    for mode in ("auto", "two-pass"):
        pipe(image, num_steps=1, guidance_mode=mode, **robot)  # warm-up
        result = pipe(image, num_steps=steps, guidance_mode=mode, **robot)
        sample[mode] = result.metadata["timings_s"]["denoising"]
    return {"config": config_name, "one_pass_step_ms": 1e3 * t_one,
            "two_pass_step_ms": 1e3 * t_two, "step_speedup": t_two / t_one,
            "steps": steps, "one_pass_denoise_s": sample["auto"],
            "two_pass_denoise_s": sample["two-pass"],
            "sample_speedup": sample["two-pass"] / sample["auto"]}


def _synthetic_inputs(config):
    rng = np.random.default_rng(0)
    t, h, w = config.num_frames, config.height, config.width
    mask = np.zeros((t, h, w), bool)
    mask[:, h // 4: h // 2, w // 4: w // 2] = True
    rgb = np.where(mask[..., None], rng.integers(0, 255, (t, h, w, 3)), 0).astype(np.uint8)
    points = np.where(mask[..., None], np.array([0.0, 0.0, 0.8]), 0.0).astype(np.float32)
    image = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    return image, {"robot_rgb": rgb, "robot_pointmap": points, "robot_mask": mask}


def peak_memory_child(config_name: str, mode: str) -> None:
    """Runs in a fresh process: one full sample, prints JSON with ru_maxrss."""
    from k4d_generator import memory
    from k4d_generator.pipeline import Kinema4DPipeline

    config, components = _build(config_name)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    pipe = Kinema4DPipeline.from_components(components)
    image, robot = _synthetic_inputs(config)
    pipe(image, num_steps=config.num_inference_steps, guidance_mode=mode, **robot)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    est = memory.estimate(components.transformer.config, pipe.vae.config, config.num_frames,
                          config.height, config.width, 1 if mode == "auto" else 2, 4, "cpu",
                          available=0)
    weights = sum(p.numel() * p.element_size() for m in (components.transformer, pipe.vae,
                                                         pipe.image_encoder)
                  for p in m.parameters())
    print(json.dumps({"config": config_name, "mode": mode, "peak_rss_mib": peak / 2**20,
                      "rss_after_build_mib": before / 2**20, "weights_mib": weights / 2**20,
                      "estimate_sampling_mib": est.required_bytes / 2**20}))


def bench_peak_memory(config_name: str) -> list[dict]:
    rows = []
    for mode in ("auto", "two-pass"):
        out = subprocess.run([sys.executable, __file__, "--peak-memory-child", config_name, mode],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "small"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch and ORT intra-op threads")
    parser.add_argument("--peak-memory-child", nargs=2, metavar=("CONFIG", "MODE"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    if args.peak_memory_child:
        peak_memory_child(*args.peak_memory_child)
        return
    report = {"torch": torch.__version__, "threads": args.threads, "backends": [],
              "guidance": [], "peak_memory": []}
    for name in args.configs:
        report["backends"].append(bench_backends(name, args.repeats, args.threads))
        report["guidance"].append(bench_guidance(name, args.repeats))
        report["peak_memory"].extend(bench_peak_memory(name))
    for row in report["backends"]:
        print(f"[{row['config']:5s}] per step: torch {row['torch_ms']:.2f} ms | ONNX Runtime "
              f"{row['onnx_ms']:.2f} ms | ORT speed-up x{row['speedup_onnx_vs_torch']:.2f} | "
              f"rel err {row['onnx_rel_err']:.1e} | export {row['export_s']:.1f} s")
    for row in report["guidance"]:
        print(f"[{row['config']:5s}] guidance per step: two-pass {row['two_pass_step_ms']:.2f} ms"
              f" | one-pass {row['one_pass_step_ms']:.2f} ms | x{row['step_speedup']:.2f}; "
              f"full denoise ({row['steps']} steps): two-pass {row['two_pass_denoise_s']:.2f} s"
              f" | one-pass {row['one_pass_denoise_s']:.2f} s | x{row['sample_speedup']:.2f}")
    for row in report["peak_memory"]:
        print(f"[{row['config']:5s}] {row['mode']:8s} peak RSS {row['peak_rss_mib']:.0f} MiB "
              f"(weights {row['weights_mib']:.1f} MiB, sampling estimate "
              f"{row['estimate_sampling_mib']:.1f} MiB)")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
