"""Distributed set-up and parallelism applied to the model from outside it (torchtitan's
shape): `parallelize(model, dist, precision, activation_checkpointing)`.

- The process group comes from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK):
  gloo on CPU, NCCL on GPU. Without torchrun the world is one process and nothing is
  initialised.
- dp_replicate x dp_shard must equal the world size (`config.resolve_degrees`).
  dp_shard > 1: FSDP2 `fully_shard` per transformer block, then the root, with a
  MixedPrecisionPolicy (bf16 parameters, fp32 reductions on GPU); dp_replicate > 1 as
  well gives HSDP on a 2-D mesh. dp_shard == 1 and dp_replicate > 1: DDP.
- Activation checkpointing recomputes each transformer block in the backward pass.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    dp_replicate: int = 1
    dp_shard: int = 1
    mesh: object = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def strategy(self) -> str:
        if self.dp_shard > 1:
            return "hsdp" if self.dp_replicate > 1 else "fsdp2"
        return "ddp" if self.dp_replicate > 1 else "single"


def init_distributed(degrees_of) -> DistInfo:
    """Initialise from torchrun's env; `degrees_of(world_size) -> (dp_replicate, dp_shard)`
    raises the readable mismatch error before any collective runs."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    replicate, shard = degrees_of(world_size)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    info = DistInfo(rank, world_size, local_rank, device, replicate, shard)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if world_size > 1:
        from torch.distributed.device_mesh import init_device_mesh

        info.mesh = init_device_mesh(device.type, (replicate, shard),
                                     mesh_dim_names=("dp_replicate", "dp_shard"))
    return info


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """`torch.use_deterministic_algorithms` for one run, restored afterwards (the flag is
    process-global and the tests train several runs in one process).

    It makes scatter/index-add style kernels and cuBLAS pick reproducible algorithms; it does
    not make results independent of the thread count: a CPU matmul's reduction order follows
    OMP_NUM_THREADS, so runs meant to agree bit for bit must also share that."""
    if not enabled:
        yield
        return
    # cuBLAS reads this when it creates its first handle (no matmul has run yet here).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def close_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def native_bf16(device: torch.device) -> bool:
    """Whether `device` runs bf16 natively: a CUDA GPU, or a CPU with AVX512-BF16 or AMX.
    Elsewhere bf16 autocast is emulated and slow (on an AVX2 CPU the frame VAE's encoding
    ran 34x and a transformer step 15x slower than in fp32: docs/benchmarks.md)."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu, 2.2+
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 autocast on GPU (official), none on CPU unless bf16 is asked for, by name or
    as `bf16-if-native` on a CPU that runs it natively."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    if precision == "bf16-if-native" and native_bf16(device):
        return torch.bfloat16
    return None


def stage_dtype(precision: str, device: torch.device | None = None) -> torch.dtype | None:
    """The autocast dtype of the from-scratch stages before the transformer (the VAE and
    refiner stages, the latent cache's encoding): bf16 only when `model.precision` asks for
    it by name, or as `bf16-if-native` where the device runs it natively. On a CPU with
    AVX512-BF16 their convolutions run ~2x faster in it and the encoding ~6x
    (benchmarks/trainer/bench_stage_precision.py); `auto` keeps them fp32."""
    if precision == "bf16-if-native":
        return torch.bfloat16 if native_bf16(device or torch.device("cpu")) else None
    return torch.bfloat16 if precision == "bf16" else None


def autocast(dtype: torch.dtype | None, device: torch.device):
    """torch.autocast to `dtype` on the device's type; a no-op context when dtype is None."""
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def parallelize(model: torch.nn.Module, info: DistInfo, compute_dtype: torch.dtype | None,
                activation_checkpointing: bool, fsdp: bool | None = None) -> torch.nn.Module:
    """Activation checkpointing, then DDP or FSDP2 per the degrees (`fsdp=True` shards even
    on a one-rank mesh, for memory benchmarks). Returns the module to call (the DDP
    wrapper, or the model itself, sharded in place, for FSDP2)."""
    if activation_checkpointing:
        model.enable_gradient_checkpointing()
    if fsdp or (fsdp is None and info.dp_shard > 1):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = info.mesh if info.dp_replicate > 1 else info.mesh["dp_shard"]
        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return model
    if info.dp_replicate > 1:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(
            model, device_ids=[info.device.index] if info.device.type == "cuda" else None)
    return model


def all_reduce_max(flag: bool, info: DistInfo) -> bool:
    """True on every rank if any rank says so (cancel and SIGTERM agreement)."""
    if not info.distributed:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


def all_reduce_mean(value: float, info: DistInfo) -> float:
    if not info.distributed:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return float(tensor.item()) / info.world_size


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()
