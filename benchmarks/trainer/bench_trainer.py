"""Trainer throughput on this machine: samples/s and peak memory per rank for 1 and 2 CPU
processes, DDP and FSDP2, and the scaling efficiency (weak scaling: the per-rank batch is
fixed, so 2 processes see twice the global batch; efficiency = samples/s(2) / (2 x
samples/s(1))).

The recipe is finetune-lora on a random model of the generator's named size (default
`small`: 13 x 96 x 144 clips, 4 blocks of dim 256) saved as a bare Wan2.1-I2V diffusers
base, LoRA rank 8 + the Kinema4D parameters trainable, activation checkpointing on, on a
synthetic episode dataset; latents are encoded once beforehand and shared, so only
training steps are timed. Each configuration is a real `k4d train` run (torchrun for 2
processes); figures are medians over the steps after `--warmup`, read from metrics.jsonl.
Threads: one per process (OMP_NUM_THREADS=1), so the 1-process run uses one core and the
2-process runs both; on a shared machine, two threads in one process stall on each other
far more than two processes do.

    .venv/bin/python benchmarks/trainer/bench_trainer.py [--size small] [--steps 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = (("1 process", 1, {"dp_replicate": -1, "dp_shard": 1}),
        ("2 processes DDP", 2, {"dp_replicate": -1, "dp_shard": 1}),
        ("2 processes FSDP2", 2, {"dp_replicate": 1, "dp_shard": -1}))


def prepare(root: Path, size: str, episodes: int) -> tuple[Path, dict]:
    from k4d_model.checkpoints import build_components, save_official
    from k4d_model.model.configs import get_model_config
    from k4d_trainer.synthetic import write_dataset

    config = get_model_config(size)
    components, _ = build_components(config, seed=0)
    save_official(components, root / "model" / "base", root / "model" / "kinema4d")
    frames = config.num_frames + (config.num_frames - 1) // 2
    data = write_dataset(root / "data", count=episodes, frames=frames,
                         height=config.height + config.height // 4,
                         width=config.width + config.width // 4)
    t = config.transformer
    recipe = {
        "recipe": "finetune-lora", "seed": 0,
        "model": {"base": str(root / "model" / "base"), "lora_rank": config.lora_rank,
                  "lora_alpha": config.lora_rank / 2, "num_frames": config.num_frames,
                  "height": config.height, "width": config.width,
                  "arm_patch_size": list(t["arm_patch_size"]),
                  "arm_bottleneck_dim": t["arm_bottleneck_dim"],
                  "activation_checkpointing": True},
        "data": {"uri": data, "latents_uri": str(root / "latents")},
        "training": {"lr": 1e-4, "warmup_steps": 0},
        "checkpoint": {"every": 0},
        "observability": {"progress_bar": False, "tensorboard": False},
    }
    return root, recipe


def run(root: Path, recipe: dict, name: str, nproc: int, parallelism: dict, steps: int,
        per_rank_batch: int) -> list[dict]:
    doc = json.loads(json.dumps(recipe))
    doc["parallelism"] = parallelism
    doc["training"].update(steps=steps, global_batch_size=per_rank_batch * nproc)
    path = root / f"{name.replace(' ', '-')}.json"
    path.write_text(json.dumps(doc))
    out = root / "runs" / path.stem
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "k4d.cli.main", "train", "--config", str(path),
                           "--out", str(out), "--nproc", str(nproc)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: k4d train failed:\n{proc.stderr[-3000:]}")
    print(f"  {name}: {time.perf_counter() - started:.0f} s wall", flush=True)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--per-rank-batch", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="k4d-bench-trainer-") as tmp:
        root, recipe = prepare(Path(tmp), args.size, args.episodes)
        subprocess.run([sys.executable, "-m", "k4d.cli.main", "train", "encode-latents",
                        "--config", str(_write(root, recipe)), "--out",
                        recipe["data"]["latents_uri"]], check=True, capture_output=True)
        rows = []
        for name, nproc, parallelism in RUNS:
            metrics = run(root, recipe, name, nproc, parallelism, args.steps,
                          args.per_rank_batch)[args.warmup:]
            rows.append({"run": name, "processes": nproc,
                         "samples_per_s": statistics.median(m["samples_per_s"] for m in metrics),
                         "step_s": statistics.median(m["step_time_s"] for m in metrics),
                         "peak_rss_mib_per_rank": [round(b / 2**20) for b in
                                                   metrics[-1]["peak_mem_bytes_per_rank"]],
                         "final_loss": metrics[-1]["loss"]})
    base = rows[0]["samples_per_s"]
    for row in rows:
        row["speedup"] = row["samples_per_s"] / base
        row["scaling_efficiency"] = row["samples_per_s"] / (row["processes"] * base)
    load = os.getloadavg()[0]
    print(f"trainer benchmark: size {args.size}, {args.steps} steps ({args.warmup} warm-up), "
          f"per-rank batch {args.per_rank_batch}, {os.cpu_count()} cores, load {load:.1f}")
    print(f"{'run':<20} {'samples/s':>10} {'step s':>8} {'x 1-proc':>9} {'efficiency':>10} "
          f"{'peak RSS MiB per rank':>24}")
    for row in rows:
        print(f"{row['run']:<20} {row['samples_per_s']:>10.3f} {row['step_s']:>8.2f} "
              f"{row['speedup']:>9.2f} {row['scaling_efficiency']:>10.2f} "
              f"{str(row['peak_rss_mib_per_rank']):>24}")
    print(json.dumps({"size": args.size, "load_avg": load, "rows": rows}))
    return 0


def _write(root: Path, recipe: dict) -> Path:
    path = root / "encode.json"
    path.write_text(json.dumps(recipe))
    return path


if __name__ == "__main__":
    raise SystemExit(main())
