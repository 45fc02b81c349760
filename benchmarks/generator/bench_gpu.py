"""GPU benchmarks of the generator (for a lent H100/H200; none was lent when this was
written, so the numbers are for the lead to fill in).

1. Per-step denoiser latency at the official size (dim 5120, 40 heads, 49 frames at
   480x720 = 35,100 tokens): torch bf16 (anchor) vs TensorRT FP16. (No FP8 figure:
   the backend refuses fp8 because the exported graph has no explicit FP8 Q/DQ, and an
   "fp8" engine without them would be FP16 under another name.)
   A 14B fp32 ONNX graph (~64 GB) does not fit the box's disk, so the TensorRT
   comparison uses the first `--trt-layers` blocks (default 4) of the same width at the
   same resolution, against torch bf16 on the same truncated model; per-block cost is
   identical across the 40 blocks, so the ratio carries over.
2. A full 49-frame 480x720 rollout (CLIP + VAE encode + 50 one-pass steps + VAE decode)
   with the full-size model in bf16 (random weights: speed does not depend on values).
   Goal: under 60 s on one H100 (official release: ~15 min on an A100).

    .venv/bin/python benchmarks/generator/bench_gpu.py [--skip-rollout] [--trt-layers 4]
    .venv/bin/python benchmarks/generator/bench_gpu.py --config tiny --device cpu  # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch


def _random_transformer(config: dict, dtype: torch.dtype, device: str, layers: int | None):
    """The transformer with random weights built directly on `device` in `dtype`
    (never materialised in fp32 on the host)."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
    from k4d_model.model import Kinema4DTransformer3DModel

    config = dict(config, num_layers=layers or config["num_layers"])
    with torch.device("meta"):
        model = Kinema4DTransformer3DModel(**config)
    model = model.to(dtype).to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.02, generator=generator)
    # to_empty left the RoPE tables (non-persistent buffers) uninitialised: rebuild them.
    model.rope = WanRotaryPosEmbed(config["attention_head_dim"], tuple(config["patch_size"]),
                                   config["rope_max_seq_len"]).to(device)
    return model.eval()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_seconds(fn, inputs, repeats: int, device: str) -> float:
    for _ in range(2):
        fn(*inputs)
    _sync(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        _sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_steps(model_config, device: str, trt_layers: int, repeats: int) -> dict:
    from k4d_generator.backends import create_backend, is_tensorrt_available
    from k4d_generator.backends.onnx_export import example_inputs
    from k4d_model.model.configs import latent_shape

    lf, lh, lw = latent_shape(model_config.num_frames, model_config.height, model_config.width)
    report = {"config": model_config.name, "latent": [lf, lh, 2 * lw], "trt_layers": trt_layers}
    full = _random_transformer(model_config.transformer, torch.bfloat16, device, None)
    inputs = tuple(x.to(device) for x in example_inputs(full, lf, lh, lw, batch=1))
    torch_full = create_backend("torch", full, precision="bf16", device=device)
    report["torch_bf16_step_s_full"] = _median_seconds(torch_full, inputs, repeats, device)
    del torch_full, full
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    part = _random_transformer(model_config.transformer, torch.bfloat16, device, trt_layers)
    torch_part = create_backend("torch", part, precision="bf16", device=device)
    report["torch_bf16_step_s_part"] = _median_seconds(torch_part, inputs, repeats, device)
    if not (device.startswith("cuda") and is_tensorrt_available()):
        report["tensorrt"] = "skipped: needs a CUDA GPU and the tensorrt package"
        return report
    with tempfile.TemporaryDirectory() as cache:
        for precision in ("fp16",):
            try:
                start = time.perf_counter()
                trt = create_backend("tensorrt", part.float().cpu(), precision=precision,
                                     cache_dir=cache, model_id=f"bench{trt_layers}")
                trt(*inputs)
                report[f"trt_{precision}_build_s"] = time.perf_counter() - start
                seconds = _median_seconds(trt, inputs, repeats, device)
                report[f"trt_{precision}_step_s_part"] = seconds
                report[f"trt_{precision}_speedup_vs_torch_bf16"] = (
                    report["torch_bf16_step_s_part"] / seconds)
            except Exception as exc:  # a failed build is reported, not raised
                report[f"trt_{precision}"] = f"failed: {type(exc).__name__}: {exc}"
    return report


def bench_rollout(model_config, device: str) -> dict:
    """Full sample with random full-size components in bf16 (VAE and CLIP in fp32)."""
    import numpy as np
    from diffusers import AutoencoderKLWan
    from k4d_generator.backends.torch_backend import TorchBackend
    from k4d_generator.pipeline import Kinema4DPipeline
    from k4d_model.checkpoints import (
        ModelComponents,
        ModelInfo,
        default_image_processor,
        default_scheduler,
    )
    from transformers import CLIPVisionConfig, CLIPVisionModel

    transformer = _random_transformer(model_config.transformer, torch.bfloat16, device, None)
    encoder = CLIPVisionModel(CLIPVisionConfig(**model_config.image_encoder)).eval()
    info = ModelInfo(name=model_config.name, version="bench", layout="k4d",
                     variant="act", num_frames=model_config.num_frames,
                     height=model_config.height, width=model_config.width)
    components = ModelComponents(transformer, AutoencoderKLWan(**model_config.vae).eval(),
                                 encoder, default_image_processor(encoder.config),
                                 default_scheduler(3.0), info)
    backend = TorchBackend(transformer, "bf16", device)
    pipe = Kinema4DPipeline(components, backend, device=device, model_id="bench")
    t, h, w = model_config.num_frames, model_config.height, model_config.width
    rng = np.random.default_rng(0)
    mask = np.zeros((t, h, w), bool)
    mask[:, h // 4: h // 2, w // 4: w // 2] = True
    robot = {"robot_rgb": np.where(mask[..., None], np.uint8(200), np.uint8(0)).repeat(3, -1),
             "robot_pointmap": np.where(mask[..., None], np.float32(0.8),
                                        np.float32(0)).repeat(3, -1),
             "robot_mask": mask}
    image = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    _sync(device)
    start = time.perf_counter()
    result = pipe(image, num_steps=model_config.num_inference_steps, seed=42, **robot)
    _sync(device)
    total = time.perf_counter() - start
    return {"rollout_s": total, "timings_s": result.metadata["timings_s"],
            "steps": model_config.num_inference_steps, "goal_s": 60.0,
            "official_a100_s": 15 * 60.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="wan14b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trt-layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-rollout", action="store_true")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_gpu: skipped: no CUDA GPU (smoke run on CPU: --config tiny --device cpu)")
        return
    from k4d_model.model.configs import get_model_config

    model_config = get_model_config(args.config)
    report = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
              "torch": torch.__version__}
    report["steps"] = bench_steps(model_config, args.device, args.trt_layers, args.repeats)
    if not args.skip_rollout:
        report["rollout"] = bench_rollout(model_config, args.device)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
