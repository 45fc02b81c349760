"""Everything that needs a GPU, as one run that writes one JSON results file.

`benchmarks/gpu/run.sh` (`make bench-gpu`) installs the carried wheels and calls this; see
its header and docs/benchmarks.md ("GPU run"). Sections, in order:

- environment:        GPU, driver-visible memory, torch/CUDA, package versions
- dit_step_14b_bf16:  one denoiser forward of the 14B-shape DiT (dim 5120, 40 blocks,
                      49 x 480 x 720 -> 35,100 tokens) in bf16, random weights built on the
                      GPU (speed does not depend on values), median of --repeats
- onnxruntime_cuda:   ONNX Runtime's CUDA provider against torch on the first
                      --part-layers blocks of the same width (a full 14B fp32 graph is ~56 GB)
- tensorrt_fp16:      TensorRT FP16 on the same truncated model, when tensorrt is importable
- lora_14b_memory:    the finetune-lora step (LoRA r64 on to_q/k/v/out, Kinema4D parameters,
                      AdamW, activation checkpointing, bf16 autocast, one GPU, no sharding)
                      measured at two reduced depths of the 14B width and shapes, the peak
                      extrapolated linearly to 40 blocks, and measured at 40 blocks too when
                      the time budget and the GPU's memory allow
- k4d_train_demo:     `k4d train` of examples/train/demo-model.yaml on the GPU for a fixed
                      number of steps, on a synthetic dataset written first
- solver_unipc, cache_dbcache, quant_fp8, compile, profile_fast (issue 44): the sampling
                      levers through the torch backend on the 14B-shape DiT (bf16, random
                      weights): a denoising loop of --lever-steps steps (UniPC or Euler) with
                      the lever on, its wall time, the steps cache-dit cached, the attention
                      kernel used, and the 50-step (or the profile's) denoising projected;
                      quant_fp8 also gives one forward's relative error against bf16 (goal
                      <= 3 %) and is skipped off Hopper; compile gives the one-time compile
                      cost apart from the steady step. Random weights make cache-dit's hit
                      rate unrepresentative: the drift of each lever on a trained model is
                      measured on CPU (benchmarks/generator/drift.py)

A section that cannot run on this machine is `skipped` with the reason; one that breaks is
`failed` with the error; neither stops the others. The file is rewritten after every
section, so a run cut short still leaves what it measured. `--dry-run` runs every section
on the CPU with the tiny shapes and a few steps and writes the same structure (GPU-only
figures are null): the test of this script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCHEMA = 1
GIB = 1024**3


class Skip(Exception):
    """The section cannot run on this machine; the message says why."""


@dataclass
class Context:
    dry_run: bool
    device: str  # "cuda" or "cpu"
    dit_config: str  # "wan14b" or "tiny"
    repeats: int
    part_layers: int
    lora_depths: tuple[int, int]
    train_steps: int
    lever_steps: int
    workdir: Path
    deadline: float  # time.monotonic() at which the budget ends

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()


# ---------------------------------------------------------------------------- helpers


def _generator_bench():
    """benchmarks/generator/bench_gpu.py: its random-weight builder and median timer."""
    from k4d.testing.modules import load_path_module

    return load_path_module(REPO / "benchmarks" / "generator" / "bench_gpu.py",
                            "k4d_bench_generator_gpu")


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / GIB, 3) if device == "cuda" else None


def _free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _tokens(config) -> tuple[list[int], int]:
    from k4d_model.model.configs import latent_shape

    lf, lh, lw = latent_shape(config.num_frames, config.height, config.width)
    pt, ph, pw = config.transformer["patch_size"]
    return [lf, lh, lw], (lf // pt) * (lh // ph) * (2 * lw // pw)


def _inputs(model, config, device: str):
    from k4d_generator.backends.onnx_export import example_inputs

    (lf, lh, lw), _ = _tokens(config)
    return tuple(x.to(device) for x in example_inputs(model, lf, lh, lw, batch=1))


# ---------------------------------------------------------------------------- sections


def environment(ctx: Context) -> dict:
    import importlib.metadata as md

    import torch

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "device": ctx.device, "cpu_count": os.cpu_count(),
            "packages": {n: version(n) for n in ("diffusers", "transformers", "peft",
                                                 "onnxruntime", "onnxruntime-gpu", "tensorrt",
                                                 "k4d-runtime", "k4d-model", "k4d-generator",
                                                 "k4d-trainer")}}
    if ctx.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / GIB, 2),
                    multiprocessors=props.multi_processor_count)
    else:
        info.update(gpu=None, gpu_memory_gib=None, multiprocessors=None)
    return info


def dit_step(ctx: Context) -> dict:
    """One denoiser forward (batch 1) of the 14B shape in bf16."""
    import torch
    from k4d_generator.backends import create_backend
    from k4d_model.model.configs import get_model_config

    bench = _generator_bench()
    config = get_model_config(ctx.dit_config)
    latent, tokens = _tokens(config)
    _reset_peak(ctx.device)
    started = time.perf_counter()
    model = bench._random_transformer(config.transformer, torch.bfloat16, ctx.device, None)
    build_s = time.perf_counter() - started
    inputs = _inputs(model, config, ctx.device)
    backend = create_backend("torch", model, precision="bf16", device=ctx.device)
    with torch.no_grad():
        seconds = bench._median_seconds(backend, inputs, ctx.repeats, ctx.device)
    result = {"config": config.name, "layers": config.transformer["num_layers"],
              "dim": config.transformer["num_attention_heads"]
              * config.transformer["attention_head_dim"],
              "clip": [config.num_frames, config.height, config.width], "latent": latent,
              "tokens": tokens, "params_b": round(sum(p.numel() for p in model.parameters())
                                                  / 1e9, 3),
              "build_s": round(build_s, 2), "repeats": ctx.repeats,
              "step_s_median": round(seconds, 4),
              "steps_50_s": round(50 * seconds, 1), "peak_mem_gib": _peak_gib(ctx.device)}
    del backend, model, inputs
    _free(ctx.device)
    return result


def _against_torch(ctx: Context, backend_name: str, **backend_kwargs) -> dict:
    """`backend_name` on the first --part-layers blocks of the config's width against torch
    fp32 and bf16 on the same blocks: build (export, engine) time, median step times."""
    import copy

    import torch
    from k4d_generator.backends import create_backend
    from k4d_model.model.configs import get_model_config

    bench = _generator_bench()
    config = get_model_config(ctx.dit_config)
    part = bench._random_transformer(config.transformer, torch.float32, "cpu", ctx.part_layers)
    inputs = _inputs(part, config, ctx.device)
    result = {"config": config.name, "part_layers": ctx.part_layers}
    for precision in ("fp32", "bf16"):
        model = copy.deepcopy(part).to(ctx.device)
        torch_backend = create_backend("torch", model, precision=precision, device=ctx.device)
        with torch.no_grad():
            result[f"torch_{precision}_step_s"] = round(
                bench._median_seconds(torch_backend, inputs, ctx.repeats, ctx.device), 5)
        del torch_backend, model
        _free(ctx.device)
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as cache:
        started = time.perf_counter()
        backend = create_backend(backend_name, part, cache_dir=cache,
                                 model_id=f"bench-part{ctx.part_layers}", **backend_kwargs)
        with torch.no_grad():
            backend(*inputs)  # export, session or engine build
        result["build_s"] = round(time.perf_counter() - started, 2)
        with torch.no_grad():
            result["step_s"] = round(
                bench._median_seconds(backend, inputs, ctx.repeats, ctx.device), 5)
        result["backend"] = backend.describe()
    return result


def onnxruntime_cuda(ctx: Context) -> dict:
    from k4d_generator.backends import is_onnxruntime_available

    if not is_onnxruntime_available():
        raise Skip("onnxruntime, onnx or onnxscript is not importable")
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    if ctx.device == "cuda" and "CUDAExecutionProvider" not in providers:
        raise Skip(f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider "
                   f"(providers: {providers}); onnxruntime-gpu and its CUDA libraries are "
                   "hundreds of MB of wheels, more than a call to the lent machine carries "
                   "(64 MiB with the working tree)")
    result = _against_torch(ctx, "onnx", device=ctx.device)
    result["ort_vs_torch_fp32"] = round(result["torch_fp32_step_s"] / result["step_s"], 3)
    return result


def tensorrt_fp16(ctx: Context) -> dict:
    from k4d_generator.backends import is_tensorrt_available

    if ctx.device != "cuda":
        raise Skip("needs a CUDA GPU")
    if not is_tensorrt_available():
        raise Skip("tensorrt is not importable; its wheels (tensorrt-cu12/13 with libs, about "
                   "1 GB) are more than a call to the lent machine carries (64 MiB)")
    result = _against_torch(ctx, "tensorrt", precision="fp16")
    result["trt_fp16_vs_torch_bf16"] = round(result["torch_bf16_step_s"] / result["step_s"], 3)
    return result


def _lora_step_peak(ctx: Context, config, layers: int, steps: int) -> dict:
    """Peak memory and step time of the finetune-lora step on `layers` blocks."""
    import torch
    from k4d_model.model.transformer import Kinema4DTransformer3DModel
    from k4d_trainer import model as model_lib
    from k4d_trainer.objective import flow_matching_loss
    from k4d_trainer.parallel import DistInfo, parallelize

    device = torch.device(ctx.device)
    with torch.device("meta"):
        transformer = Kinema4DTransformer3DModel(**dict(config.transformer, num_layers=layers))
    # bf16 while still on the meta device: 40 blocks in fp32 would be 56 GB on the GPU.
    transformer.to(torch.bfloat16).to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for param in transformer.parameters():
            param.normal_(0.0, 0.02, generator=generator)
    transformer.rope = _rope(config, device)  # to_empty left the RoPE buffers unset
    model_lib.add_lora(transformer, config.lora_rank, 32.0)
    trainable_names = set(model_lib.set_trainable(transformer, "finetune-lora"))
    with torch.no_grad():  # the trainer's dtypes: frozen base bf16, trainable fp32
        for name, param in transformer.named_parameters():
            param.data = param.data.to(torch.float32 if name in trainable_names
                                       else torch.bfloat16)
    transformer.train()
    model = parallelize(transformer, DistInfo(device=device), torch.bfloat16,
                        activation_checkpointing=True)
    trainable = [p for p in transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=2e-5, weight_decay=1e-4)
    hidden, timestep, image, arm, gain = _inputs(transformer, config, ctx.device)
    target = torch.randn(hidden.shape[0], 16, *hidden.shape[2:], device=device)
    _reset_peak(ctx.device)  # the step's peak: weights, optimizer state, activations
    times = []
    for _ in range(steps):
        if ctx.device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = model(hidden, timestep, image, arm, gain, return_dict=False)[0]
        loss = flow_matching_loss(out, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if ctx.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    result = {"layers": layers, "peak_mem_gib": _peak_gib(ctx.device),
              "step_s": round(times[-1], 3),
              "trainable_params_m": round(sum(p.numel() for p in trainable) / 1e6, 2),
              "frozen_params_b": round(sum(p.numel() for n, p in transformer.named_parameters()
                                           if n not in trainable_names) / 1e9, 3)}
    del model, transformer, optimizer, trainable, hidden, image, arm, target, out, loss
    _free(ctx.device)
    return result


def _rope(config, device):
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    return WanRotaryPosEmbed(config.transformer["attention_head_dim"],
                             tuple(config.transformer["patch_size"]),
                             config.transformer["rope_max_seq_len"]).to(device)


def lora_14b_memory(ctx: Context) -> dict:
    import torch
    from k4d_model.model.configs import get_model_config

    config = get_model_config(ctx.dit_config)
    full_layers = config.transformer["num_layers"]
    low, high = ctx.lora_depths
    measured = [_lora_step_peak(ctx, config, layers, steps=2) for layers in (low, high)]
    result = {"config": config.name, "full_layers": full_layers, "lora_rank": config.lora_rank,
              "strategy": "one GPU, no sharding, activation checkpointing, bf16 autocast, "
                          "frozen base bf16, trainable fp32 + AdamW",
              "reduced_depths": measured, "extrapolated_peak_gib": None,
              "per_block_gib": None, "measured_full_depth": None,
              "official_gb_per_gpu": 67.0}
    if ctx.device != "cuda":
        return result
    per_block = (measured[1]["peak_mem_gib"] - measured[0]["peak_mem_gib"]) / (high - low)
    base = measured[0]["peak_mem_gib"] - per_block * low
    result["per_block_gib"] = round(per_block, 3)
    result["extrapolated_peak_gib"] = round(base + per_block * full_layers, 2)
    # The full depth, when it fits in the GPU (with 10% to spare) and in the time left.
    total_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    step_per_block = measured[1]["step_s"] / high
    full_time_s = 2 * step_per_block * full_layers + 60  # two steps + building 14B weights
    if result["extrapolated_peak_gib"] > 0.9 * total_gib:
        result["measured_full_depth"] = (f"skipped: extrapolated {result['extrapolated_peak_gib']}"
                                         f" GiB > 90% of {total_gib:.0f} GiB")
    elif full_time_s > ctx.remaining_s() - 120:  # keep two minutes for the train section
        result["measured_full_depth"] = (f"skipped: ~{full_time_s:.0f} s needed, "
                                         f"{ctx.remaining_s():.0f} s left in the budget")
    else:
        result["measured_full_depth"] = _lora_step_peak(ctx, config, full_layers, steps=2)
    return result


def k4d_train_demo(ctx: Context) -> dict:
    """`k4d train` of the demo recipe on a synthetic dataset, a fixed number of steps."""
    import yaml
    from k4d_trainer.synthetic import write_dataset

    recipe = yaml.safe_load((REPO / "examples" / "train" / "demo-model.yaml").read_text())
    episodes = 2 if ctx.dry_run else 16
    if ctx.dry_run:  # the tiny model and clip (5 x 32 x 48) on episodes of the tests' size
        recipe["model"]["size"] = "tiny"
        data = write_dataset(ctx.workdir / "train-data", count=episodes)
    else:  # the demo data's stored size, adapted by the trainer to the 13 x 96 x 144 clip
        data = write_dataset(ctx.workdir / "train-data", count=episodes, frames=17,
                             height=128, width=192)
    recipe["data"] = {"uri": data, "max_episodes": episodes}
    vae_steps, long_steps = (2, 1) if ctx.dry_run else (200, 20)
    recipe["vae"].update(steps=vae_steps, long_steps=long_steps, checkpoint_every=0,
                         log_every=max(1, vae_steps // 2), warmup_steps=min(
                             recipe["vae"].get("warmup_steps", 0), vae_steps // 2))
    recipe["vae"].pop("heldout_uri", None)  # the validation episodes are not on that machine
    # nor the cascade split: the timed section is the transformer's, without the sample
    # refiner's stage after it, nor the first-depth network's before it (its object weight
    # needs episodes with object ids, which these synthetic ones lack)
    recipe.pop("cascade", None)
    recipe.pop("refiner", None)
    for option in ("cascade", "refiner_first_depth"):
        recipe["model"].get("fidelity", {}).pop(option, None)
    recipe["training"].update(steps=ctx.train_steps, warmup_steps=min(
        recipe["training"]["warmup_steps"], ctx.train_steps // 2), decay_steps=min(
        recipe["training"].get("decay_steps", 0), ctx.train_steps // 2))
    if ctx.dry_run:
        recipe["training"]["global_batch_size"] = 2
        # the tiny size's causal VAE: the change target needs a per-frame one
        recipe["training"]["latent_target"] = "absolute"
        recipe["vae"].pop("crop_frames", None)
        recipe["vae"].update(batch_size=2, long_batch_size=1, crop=16, long_frames=5)
    recipe["checkpoint"] = {"every": 0, "keep": 1}
    path = ctx.workdir / "demo-model-gpu.yaml"
    path.write_text(yaml.safe_dump(recipe))
    run = ctx.workdir / "train-run"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "k4d.cli.main", "train", "--config", str(path),
                           "--out", str(run)], capture_output=True, text=True,
                          timeout=max(30.0, ctx.remaining_s()))
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"k4d train exited {done.returncode}: {done.stderr[-1500:]}")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
               if line.strip()]
    step_times = [m["step_time_s"] for m in metrics if m.get("step_time_s") is not None]
    later = step_times[len(step_times) // 4:] or step_times  # past the first steps' warm-up
    step_s = statistics.median(later)
    peak = max((m.get("peak_mem_bytes") or 0) for m in metrics)
    return {"recipe": "examples/train/demo-model.yaml", "episodes": episodes,
            "vae_steps": vae_steps, "vae_long_steps": long_steps,
            "steps": len(metrics),
            "global_batch_size": recipe["training"]["global_batch_size"],
            "wall_s": round(wall, 1), "step_s_median": round(step_s, 4),
            "samples_per_s": round(recipe["training"]["global_batch_size"] / step_s, 2),
            "first_loss": metrics[0]["loss"], "last_loss": metrics[-1]["loss"],
            "peak_mem_gib": round(peak / GIB, 3) if peak else None,
            "summary": json.loads(done.stdout.strip().splitlines()[-1])["state"]}


def _lever_model(ctx: Context):
    """The 14B-shape DiT (tiny in a dry run) behind the torch backend, and its inputs."""
    import torch
    from k4d_generator.backends import create_backend
    from k4d_model.model.configs import get_model_config

    bench = _generator_bench()
    config = get_model_config(ctx.dit_config)
    model = bench._random_transformer(config.transformer, torch.bfloat16, ctx.device, None)
    inputs = _inputs(model, config, ctx.device)
    backend = create_backend("torch", model, precision="bf16", device=ctx.device)
    return config, backend, inputs


def _denoise(ctx: Context, backend, inputs, options, steps: int) -> dict:
    """`steps` sampler steps of the levers' denoising loop (the pipeline's step 6 on fixed
    conditioning): wall time, per-step time, cached steps, attention kernel, timings."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    bench = _generator_bench()
    hidden, timestep, image_embeds, arm_cond, gain = inputs
    channels = backend.model.config.out_channels
    latents, condition = hidden[:, :channels].float(), hidden[:, channels:]
    if (options.solver or "unipc") == "unipc":
        sampler = UniPCMultistepScheduler(prediction_type="flow_prediction",
                                          use_flow_sigmas=True, num_train_timesteps=1000,
                                          flow_shift=3.0)
    else:
        sampler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    sampler.set_timesteps(steps, device=ctx.device)
    backend.prepare_levers(options, steps)
    bench._sync(ctx.device)
    started = time.perf_counter()
    with torch.no_grad():
        for t in sampler.timesteps:
            velocity = backend(torch.cat([latents.to(condition.dtype), condition], dim=1),
                               t.expand(1).float(), image_embeds, arm_cond, gain)
            latents = sampler.step(velocity, t, latents, return_dict=False)[0]
    bench._sync(ctx.device)
    seconds = time.perf_counter() - started
    report = backend.lever_report()
    return {"options": options.to_dict(), "steps": steps, "denoise_s": round(seconds, 3),
            "step_s_mean": round(seconds / steps, 4),
            "cached_steps": report["cached_steps"],
            "attention_backend": report["attention_backend"],
            "compile_s": None if report["compile_s"] is None else round(report["compile_s"], 2),
            "steady_step_s": None if report["steady_step_s"] is None
            else round(report["steady_step_s"], 4),
            "finite": bool(torch.isfinite(latents).all())}


def _lever_section(ctx: Context, layer: dict, projected_steps: int | None = None) -> dict:
    from k4d.sampling import resolve_sampling

    options = resolve_sampling(layer)
    config, backend, inputs = _lever_model(ctx)
    _reset_peak(ctx.device)
    steps = ctx.lever_steps
    try:
        result = _denoise(ctx, backend, inputs, options, steps)
    finally:
        del backend, inputs
        _free(ctx.device)
    per_step = result["steady_step_s"] or result["step_s_mean"]
    target = projected_steps or options.steps or 50
    result.update(config=config.name, projected_steps=target,
                  projected_denoise_s=round(per_step * target * (1 - result["cached_steps"]
                                                                 / max(steps, 1)), 1),
                  peak_mem_gib=_peak_gib(ctx.device))
    return result


def solver_unipc(ctx: Context) -> dict:
    """UniPC at 20 steps against the reference's 50 Euler steps (same forward)."""
    return _lever_section(ctx, {"profile": "reference", "solver": "unipc", "steps": 20})


def cache_dbcache(ctx: Context) -> dict:
    """The reference sampler with cache-dit's DBCache (threshold 0.08)."""
    return _lever_section(ctx, {"profile": "reference", "cache": "dbcache"})


def quant_fp8(ctx: Context) -> dict:
    """FP8 (torchao float8 rowwise dynamic) linear layers: one forward's relative error
    against bf16 on the same weights (goal <= 3 %), and the forward time of each."""
    import torch
    from k4d.errors import InvalidArgument
    from k4d.sampling import resolve_sampling

    bench = _generator_bench()
    config, backend, inputs = _lever_model(ctx)
    try:
        backend.check_levers(resolve_sampling({"quant": "fp8"}))
    except InvalidArgument as refused:
        raise Skip(str(refused)) from None
    try:
        with torch.no_grad():
            bf16_s = bench._median_seconds(backend, inputs, ctx.repeats, ctx.device)
            reference = backend(*inputs)
            backend.prepare_levers(resolve_sampling({"quant": "fp8"}), 1)
            fp8_s = bench._median_seconds(backend, inputs, ctx.repeats, ctx.device)
            quantised = backend(*inputs)
        error = float((quantised - reference).norm() / reference.norm())
    finally:
        del backend, inputs
        _free(ctx.device)
    return {"config": config.name, "bf16_step_s": round(bf16_s, 4),
            "fp8_step_s": round(fp8_s, 4), "speedup": round(bf16_s / fp8_s, 3),
            "relative_error": round(error, 5), "goal_relative_error": 0.03,
            "projected_denoise_s": round(50 * fp8_s, 1), "peak_mem_gib": _peak_gib(ctx.device)}


def compile_blocks(ctx: Context) -> dict:
    """torch.compile of each block: the one-time cost apart from the steady step."""
    from k4d_generator.backends.levers import compile_refusal

    why = compile_refusal(__import__("torch").device(ctx.device))
    if why is not None:
        raise Skip(why)
    return _lever_section(ctx, {"profile": "reference", "compile": True})


def profile_fast(ctx: Context) -> dict:
    """The `fast` profile (UniPC, its steps, DBCache + TaylorSeer); goal <= 45 s a rollout."""
    from k4d.sampling import PROFILES

    result = _lever_section(ctx, {"profile": "fast"}, PROFILES["fast"]["steps"])
    result["goal_rollout_s"] = 45.0
    return result


# Name, function, the seconds it needs at least on a GPU (a section is skipped, with the
# reason, when less is left of the budget).
SECTIONS = [
    ("environment", environment, 0),
    ("dit_step_14b_bf16", dit_step, 60),
    ("onnxruntime_cuda", onnxruntime_cuda, 90),
    ("tensorrt_fp16", tensorrt_fp16, 150),
    ("lora_14b_memory", lora_14b_memory, 90),
    ("k4d_train_demo", k4d_train_demo, 60),
    ("solver_unipc", solver_unipc, 40),
    ("cache_dbcache", cache_dbcache, 40),
    ("quant_fp8", quant_fp8, 60),
    ("compile", compile_blocks, 120),
    ("profile_fast", profile_fast, 40),
]


def _write(path: Path, results: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny shapes, few steps: the same file structure, no figures")
    parser.add_argument("--out", default="bench-gpu.json", help="results file (JSON)")
    parser.add_argument("--budget-s", type=float, default=510.0,
                        help="time for all sections (the lent-GPU call is <= 9 min)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--part-layers", type=int, default=1,
                        help="blocks of the truncated model for ONNX Runtime and TensorRT")
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--lever-steps", type=int, default=8,
                        help="denoising steps timed per sampling-lever section (projected "
                             "to the full count)")
    parser.add_argument("--only", default="", help="comma-separated section names")
    args = parser.parse_args(argv)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        sys.stderr.write("bench-gpu: error: no CUDA GPU (use --dry-run for the CPU check)\n")
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    unknown = only - {name for name, _, _ in SECTIONS}
    if unknown:
        sys.stderr.write(f"bench-gpu: error: --only: unknown sections {sorted(unknown)}\n")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="k4d-bench-gpu-"))
    ctx = Context(dry_run=args.dry_run, device="cpu" if args.dry_run else "cuda",
                  dit_config="tiny" if args.dry_run else "wan14b",
                  repeats=2 if args.dry_run else args.repeats, part_layers=args.part_layers,
                  lora_depths=(1, 2) if args.dry_run else (2, 4),
                  train_steps=3 if args.dry_run else args.train_steps,
                  lever_steps=4 if args.dry_run else args.lever_steps, workdir=workdir,
                  deadline=time.monotonic() + args.budget_s)
    results = {"schema": SCHEMA, "dry_run": args.dry_run,
               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "budget_s": args.budget_s, "sections": {}}
    for name, section, needs_s in SECTIONS:
        started = time.perf_counter()
        if only and name not in only:
            entry = {"status": "skipped", "reason": "not in --only"}
        elif not args.dry_run and ctx.remaining_s() < needs_s:
            entry = {"status": "skipped", "reason": f"time budget: {ctx.remaining_s():.0f} s "
                                                    f"left, the section needs ~{needs_s} s"}
        else:
            try:
                entry = {"status": "ok", **section(ctx)}
            except Skip as why:
                entry = {"status": "skipped", "reason": str(why)}
            except Exception as exc:  # reported in the file; the other sections still run
                entry = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000],
                         "traceback": traceback.format_exc()[-3000:]}
        entry["seconds"] = round(time.perf_counter() - started, 2)
        results["sections"][name] = entry
        results["elapsed_s"] = round(args.budget_s - ctx.remaining_s(), 1)
        _write(out, results)
        print(f"bench-gpu: {name}: {entry['status']} ({entry['seconds']} s)"
              + (f": {entry.get('reason') or entry.get('error')}"
                 if entry["status"] != "ok" else ""), flush=True)
    print(f"bench-gpu: results in {out}")
    return 1 if any(e["status"] == "failed" for e in results["sections"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
