"""The finetune-lora recipe at the real Kinema4D 14B shapes on one GPU: samples/s and peak
GPU memory with FSDP2 (one rank, bf16 MixedPrecisionPolicy) and activation checkpointing.
The official figure to beat: 67 GB per GPU (DeepSpeed ZeRO-2, 32 x A100, batch 1/GPU).

Random weights (no checkpoint download): the generator's `wan14b` transformer (dim 5120,
40 layers, 40 heads) is built on the meta device and materialised on the GPU in bf16 for
the frozen base; LoRA r64/alpha 32 on to_q/to_k/to_v/to_out.0 and the Kinema4D parameters
are trainable in fp32 (AdamW). Inputs have the 49 x 480 x 720 latent shapes: hidden
states (1, 36, 13, 60, 180), CLIP tokens (1, 257, 1280), arm_cond (1, 20, 13, 60, 180).
The step is the trainer's own: `parallelize` (AC + FSDP2) and the flow-matching loss.

Without a CUDA GPU it prints one line and exits 0.

    .venv/bin/python benchmarks/trainer/bench_gpu_lora14b.py [--steps 6] [--warmup 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("== benchmarks/trainer/bench_gpu_lora14b.py: skipped: no CUDA GPU")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-ac", action="store_true", help="without activation checkpointing")
    args = parser.parse_args()

    import torch.distributed as dist
    from k4d_model.model.configs import get_model_config
    from k4d_model.model.transformer import Kinema4DTransformer3DModel
    from k4d_trainer import model as model_lib
    from k4d_trainer.objective import flow_matching_loss
    from k4d_trainer.parallel import DistInfo, parallelize

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh

    device = torch.device("cuda", 0)
    mesh = init_device_mesh("cuda", (1, 1), mesh_dim_names=("dp_replicate", "dp_shard"))
    info = DistInfo(0, 1, 0, device, 1, 1, mesh)
    config = get_model_config("wan14b")
    with torch.device("meta"):
        transformer = Kinema4DTransformer3DModel(**config.transformer)
    transformer.to_empty(device=device)
    with torch.no_grad():
        for param in transformer.parameters():
            param.normal_(0.0, 0.02)
    torch.manual_seed(0)
    model_lib.add_lora(transformer, 64, 32.0)
    trainable_names = set(model_lib.set_trainable(transformer, "finetune-lora"))
    with torch.no_grad():  # frozen base in bf16, trainable parameters in fp32
        for name, param in transformer.named_parameters():
            param.data = param.data.to(torch.float32 if name in trainable_names
                                       else torch.bfloat16)
    transformer.train()
    model = parallelize(transformer, info, torch.bfloat16, activation_checkpointing=not args.no_ac,
                        fsdp=True)
    trainable = [p for p in transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=2e-5, weight_decay=1e-4)
    hidden = torch.randn(1, 36, 13, 60, 180, device=device)
    image = torch.randn(1, 257, 1280, device=device)
    arm = torch.randn(1, 20, 13, 60, 180, device=device)
    target = torch.randn(1, 16, 13, 60, 180, device=device)
    times = []
    torch.cuda.reset_peak_memory_stats(device)
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(hidden, torch.tensor([500.0], device=device), image, arm,
                        return_dict=False)[0]
        loss = flow_matching_loss(out, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated(device)
    result = {"gpu": torch.cuda.get_device_name(device), "shape": "49x480x720",
              "strategy": "fsdp2 (1 GPU) + " + ("no AC" if args.no_ac else "activation checkpointing"),
              "trainable_params": sum(p.numel() for p in trainable),
              "step_s_median": sorted(times)[len(times) // 2],
              "samples_per_s": 1.0 / sorted(times)[len(times) // 2],
              "peak_mem_gb": peak / 1e9, "official_gb_per_gpu": 67.0,
              "vs_official": peak / 1e9 / 67.0}
    print(json.dumps(result))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
