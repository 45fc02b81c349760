"""CPU benchmarks of the generator, each figure next to its anchor measured in the same run.

1. Per-step denoiser latency, torch eager fp32 vs ONNX Runtime (CPU EP), on `tiny` and
   `small` (random weights; latency does not depend on the values). Anchor: torch.
2. One-pass vs two-pass (batched) guidance per step and per full sample. Anchor: two-pass
   (what the official release runs). Expect ~2x.
3. Memory: RSS growth while sampling (peak minus RSS with the model loaded), one-pass and
   two-pass, each in a fresh subprocess, next to the pipeline's own memory estimate.

Timed pairs are measured alternately (A, B, A, B, ...), so load from other processes on a
shared machine hits both sides alike; the ratios are the robust figures.

    .venv/bin/python benchmarks/generator/bench_cpu.py [--configs tiny small] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch


def _build(config_name: str):
    from k4d_model.checkpoints import build_components
    from k4d_model.model.configs import get_model_config

    config = get_model_config(config_name)
    components, _ = build_components(config, seed=0)
    return config, components


def _latent_grid(config):
    from k4d_model.model.configs import latent_shape

    return latent_shape(config.num_frames, config.height, config.width)


def _time_pair(fn_a, inputs_a, fn_b, inputs_b, repeats: int) -> dict[str, float]:
    """Median wall and CPU (process) seconds per call of A and B, measured alternately
    (A, B, A, B, ...) after two warm-up calls each. On a shared machine the wall time swings
    with other processes' load; the process CPU time (all threads, incl. ORT's pool) is the
    steadier measure of the work a call costs."""
    for _ in range(2):
        fn_a(*inputs_a)
        fn_b(*inputs_b)
    samples = {"a_wall": [], "a_cpu": [], "b_wall": [], "b_cpu": []}
    for _ in range(repeats):
        for side, fn, inputs in (("a", fn_a, inputs_a), ("b", fn_b, inputs_b)):
            wall, cpu = time.perf_counter(), time.process_time()
            fn(*inputs)
            samples[f"{side}_cpu"].append(time.process_time() - cpu)
            samples[f"{side}_wall"].append(time.perf_counter() - wall)
    return {k: statistics.median(v) for k, v in samples.items()}


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
        t = _time_pair(torch_backend, inputs, onnx_backend, inputs, repeats)
    tokens = lf * (lh // 2) * (2 * lw // 2)
    return {"config": config_name, "tokens": tokens, "torch_ms": 1e3 * t["a_wall"],
            "onnx_ms": 1e3 * t["b_wall"], "speedup_onnx_vs_torch": t["a_wall"] / t["b_wall"],
            "torch_cpu_ms": 1e3 * t["a_cpu"], "onnx_cpu_ms": 1e3 * t["b_cpu"],
            "cpu_speedup_onnx_vs_torch": t["a_cpu"] / t["b_cpu"],
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
    t = _time_pair(backend, one, backend, two, repeats)

    pipe = Kinema4DPipeline(components, backend)
    image, robot = _synthetic_inputs(config)
    steps = config.num_inference_steps
    def sample_cpu_seconds(mode: str) -> float:
        start = time.process_time()
        pipe(image, num_steps=steps, guidance_mode=mode, **robot)
        return time.process_time() - start

    pipe(image, num_steps=1, **robot)  # warm-up
    one_cpu, two_cpu = [], []
    for _ in range(3):  # alternate the modes, median of three each
        one_cpu.append(sample_cpu_seconds("auto"))
        two_cpu.append(sample_cpu_seconds("two-pass"))
    one_s, two_s = statistics.median(one_cpu), statistics.median(two_cpu)
    return {"config": config_name, "one_pass_step_ms": 1e3 * t["a_wall"],
            "two_pass_step_ms": 1e3 * t["b_wall"], "step_speedup": t["b_wall"] / t["a_wall"],
            "one_pass_step_cpu_ms": 1e3 * t["a_cpu"], "two_pass_step_cpu_ms": 1e3 * t["b_cpu"],
            "step_cpu_speedup": t["b_cpu"] / t["a_cpu"], "steps": steps,
            "one_pass_sample_cpu_s": one_s, "two_pass_sample_cpu_s": two_s,
            "sample_cpu_speedup": two_s / one_s}


def _synthetic_inputs(config):
    rng = np.random.default_rng(0)
    t, h, w = config.num_frames, config.height, config.width
    mask = np.zeros((t, h, w), bool)
    mask[:, h // 4: h // 2, w // 4: w // 2] = True
    rgb = np.where(mask[..., None], rng.integers(0, 255, (t, h, w, 3)), 0).astype(np.uint8)
    points = np.where(mask[..., None], np.array([0.0, 0.0, 0.8]), 0.0).astype(np.float32)
    image = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    return image, {"robot_rgb": rgb, "robot_pointmap": points, "robot_mask": mask}


class _PeakRss:
    """Samples this process's RSS every 2 ms in a thread; `.peak` is the maximum seen."""

    def __init__(self):
        import threading

        import psutil

        self._process = psutil.Process()
        self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def peak_memory_child(config_name: str, mode: str) -> None:
    """Runs in a fresh process: one full sample; prints JSON with the RSS growth during
    sampling (peak minus the RSS with the model loaded and warmed up)."""
    import psutil
    from k4d_generator.pipeline import Kinema4DPipeline
    from k4d_model import memory

    config, components = _build(config_name)
    pipe = Kinema4DPipeline.from_components(components)
    image, robot = _synthetic_inputs(config)
    pipe(image, num_steps=1, guidance_mode=mode, **robot)  # warm-up: lazy allocations
    baseline = psutil.Process().memory_info().rss
    with _PeakRss() as rss:
        pipe(image, num_steps=config.num_inference_steps, guidance_mode=mode, **robot)
    est = memory.estimate(components.transformer.config, pipe.vae.config, config.num_frames,
                          config.height, config.width, 1 if mode == "auto" else 2, 4, "cpu",
                          available=0)
    weights = sum(p.numel() * p.element_size() for m in (components.transformer, pipe.vae,
                                                         pipe.image_encoder)
                  for p in m.parameters())
    print(json.dumps({"config": config_name, "mode": mode, "rss_loaded_mib": baseline / 2**20,
                      "sampling_growth_mib": (rss.peak - baseline) / 2**20,
                      "weights_mib": weights / 2**20,
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
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and ORT intra-op threads (1: on a shared box, idle OpenMP/ORT "
                             "threads spin while a sibling is descheduled, which inflates both "
                             "wall and CPU time at random)")
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
              f"{row['onnx_ms']:.2f} ms | ORT speed-up x{row['speedup_onnx_vs_torch']:.2f} wall, "
              f"x{row['cpu_speedup_onnx_vs_torch']:.2f} CPU time ({row['torch_cpu_ms']:.2f} vs "
              f"{row['onnx_cpu_ms']:.2f} ms) | rel err {row['onnx_rel_err']:.1e} | "
              f"export {row['export_s']:.1f} s")
    for row in report["guidance"]:
        print(f"[{row['config']:5s}] guidance per step: two-pass {row['two_pass_step_ms']:.2f} ms"
              f" | one-pass {row['one_pass_step_ms']:.2f} ms | x{row['step_speedup']:.2f} wall, "
              f"x{row['step_cpu_speedup']:.2f} CPU time; whole sample ({row['steps']} steps, CPU "
              f"time): two-pass {row['two_pass_sample_cpu_s']:.2f} s | one-pass "
              f"{row['one_pass_sample_cpu_s']:.2f} s | x{row['sample_cpu_speedup']:.2f}")
    for row in report["peak_memory"]:
        print(f"[{row['config']:5s}] {row['mode']:8s} RSS growth while sampling "
              f"{row['sampling_growth_mib']:.1f} MiB vs estimate {row['estimate_sampling_mib']:.1f}"
              f" MiB (RSS with model loaded {row['rss_loaded_mib']:.0f} MiB, weights "
              f"{row['weights_mib']:.1f} MiB)")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
