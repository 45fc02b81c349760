"""The sampling levers of the torch backend (issue 44): step caching through cache-dit,
FP8 linear layers through torchao, compiled transformer blocks, and the attention kernel
actually used.

- Caching: cache-dit's DBCache (optionally with its TaylorSeer calibrator) attached to our
  transformer through its `BlockAdapter` (Wan's block forward, `ForwardPattern.Pattern_2`);
  nothing hand-written. Attached once, its context is refreshed before every generation,
  so no cached residual of one request reaches the next. `cache: none` detaches it.
- FP8: torchao's float8 rowwise dynamic quantisation of the blocks' linear layers, on a GPU
  with FP8 tensor cores (Hopper sm_90 or newer). Elsewhere the request is refused
  (InvalidArgument on `quant`), never run in bf16 instead. Quantisation is in place: a model
  quantised once stays so until it is loaded again (a later `quant: none` is refused).
- Compile: `torch.compile` of each repeated block (regional compilation); the first
  compiled call's time is reported apart from the steady state.
- Attention: the SDPA kernel seen on a generation's first eager call (flash, efficient,
  cudnn, math).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time

import torch
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.sampling import SamplingOptions
from torch.utils._python_dispatch import TorchDispatchMode

CACHE_DIT_VERSION = "1.5.3"
FP8_MIN_CAPABILITY = (9, 0)
# SDPA kernels by their aten op; none of them seen means the math path (matmul + softmax)
_ATTENTION_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused (overrideable)",
}


def is_cache_dit_available() -> bool:
    from importlib.util import find_spec

    return find_spec("cache_dit") is not None


def fp8_refusal(device: torch.device) -> str | None:
    """Why FP8 cannot run on `device` (None when it can)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"this backend runs on {device.type}"
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        return (f"{torch.cuda.get_device_name(device)} is sm_{capability[0]}{capability[1]}, "
                "without FP8 tensor cores")
    return None


def compile_refusal(device: torch.device) -> str | None:
    """Why torch.compile cannot build kernels here (None when it can): inductor needs a C++
    compiler on CPU and Triton on a GPU."""
    if device.type == "cpu":
        cxx = os.environ.get("CXX", "g++")
        if shutil.which(cxx) is None and shutil.which("c++") is None:
            return f"torch.compile on cpu needs a C++ compiler ({cxx} not found)"
    elif device.type == "cuda":
        from importlib.util import find_spec

        if find_spec("triton") is None:
            return "torch.compile on cuda needs triton (pip install triton)"
    return None


class BlockLevers:
    """The levers of one transformer, owned by its torch backend. `check` refuses what
    cannot run; `prepare` applies the options of one generation; `wrap_call` times the
    denoiser calls and reads the attention kernel; `report` says what happened."""

    def __init__(self, transformer: torch.nn.Module, device: torch.device):
        self.transformer = transformer
        self.device = device
        self.blocks = list(transformer.blocks)  # the original blocks (cache-dit wraps them)
        self.quant = "none"
        self.compiled = False
        self.cache_attached = False
        self._compile_fresh = False
        self._calls: list[float] = []
        self._attention: str | None = None
        self._cache_on = False

    # ------------------------------------------------------------ checks

    def check(self, options: SamplingOptions) -> None:
        if options.quant == "fp8":
            why = fp8_refusal(self.device)
            if why is not None:
                raise InvalidArgument.for_field(
                    "sampling.quant", f"fp8 needs a GPU with FP8 tensor cores (Hopper sm_90 or newer); "
                             f"{why}")
        elif self.quant == "fp8":
            raise FailedPrecondition("the loaded transformer is quantised to fp8; load the "
                                     "model again to sample without it")
        if options.cache != "none" and not is_cache_dit_available():
            raise FailedPrecondition(f"--cache {options.cache} needs cache-dit: pip install "
                                     f"cache-dit=={CACHE_DIT_VERSION}")
        if options.compile:
            why = compile_refusal(self.device)
            if why is not None:
                raise FailedPrecondition(f"--compile: {why}")

    # ------------------------------------------------------------ per generation

    def prepare(self, options: SamplingOptions, num_steps: int) -> None:
        self.check(options)
        if options.quant == "fp8" and self.quant != "fp8":
            self._quantise_fp8()
        self._set_compiled(options.compile)
        self._set_cache(options, num_steps)
        self._calls = []
        self._attention = None

    def _quantise_fp8(self) -> None:
        try:
            from torchao.quantization import (
                Float8DynamicActivationFloat8WeightConfig,
                PerRow,
                quantize_,
            )
        except ImportError:
            raise FailedPrecondition("--quant fp8 needs torchao: pip install torchao") from None
        config = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())
        for block in self.blocks:
            quantize_(block, config)
        self.quant = "fp8"

    def _set_compiled(self, wanted: bool) -> None:
        if wanted and not self.compiled:
            for block in self.blocks:
                block.compile()  # in place: the block's own __call__ runs compiled
            self._compile_fresh = True
        elif not wanted and self.compiled:
            for block in self.blocks:
                block._compiled_call_impl = None  # back to eager (what nn.Module.compile set)
        self.compiled = wanted

    def _set_cache(self, options: SamplingOptions, num_steps: int) -> None:
        if options.cache == "none":
            if self.cache_attached:
                import cache_dit

                cache_dit.disable_cache(self.transformer)
                self.cache_attached = False
            self._cache_on = False
            return
        os.environ.setdefault("CACHE_DIT_LOG_LEVEL", "warning")
        import cache_dit

        configs = self._cache_configs(options, num_steps)
        if not self.cache_attached:
            adapter = cache_dit.BlockAdapter(
                transformer=self.transformer, blocks=self.transformer.blocks,
                forward_pattern=cache_dit.ForwardPattern.Pattern_2, pipe=None,
                check_forward_pattern=True, has_separate_cfg=False)
            cache_dit.enable_cache(adapter, **configs)
            self.cache_attached = True
        # a fresh context for every generation: nothing cached leaks between requests
        cache_dit.refresh_context(self.transformer, **configs)
        self._cache_on = True

    @staticmethod
    def _cache_configs(options: SamplingOptions, num_steps: int) -> dict:
        from cache_dit import DBCacheConfig, TaylorSeerCalibratorConfig

        # Fn=1, Bn=0: the first block decides, as cache-dit's Wan examples; a quarter of
        # the steps (at most cache-dit's 8) are computed in full before any is cached.
        config = DBCacheConfig(Fn_compute_blocks=1, Bn_compute_blocks=0,
                               residual_diff_threshold=float(options.cache_threshold),
                               max_warmup_steps=max(1, min(8, num_steps // 4)),
                               num_inference_steps=num_steps, enable_separate_cfg=False)
        calibrator = (TaylorSeerCalibratorConfig(taylorseer_order=1)
                      if options.cache == "dbcache-taylorseer" else None)
        return {"cache_config": config, "calibrator_config": calibrator}

    def call(self, forward, *args):
        """Run the denoiser `forward(*args)`, timed; the first eager call of a generation
        records the attention kernel."""
        started = time.perf_counter()
        if self._attention is None and not self.compiled:
            with _SeenOps() as seen:
                out = forward(*args)
            self._attention = seen.attention()
        else:
            out = forward(*args)
        self._calls.append(time.perf_counter() - started)
        return out

    def report(self) -> dict:
        report = {"cached_steps": 0, "attention_backend": self._attention, "compile_s": None,
                  "steady_step_s": None, "quant": self.quant, "compiled": self.compiled}
        if self.compiled and self._attention is None:
            report["attention_backend"] = "compiled (inductor)"
        if self._calls:
            steady = self._calls[1:] or self._calls
            report["steady_step_s"] = statistics.median(steady)
            if self._compile_fresh:
                report["compile_s"] = max(0.0, self._calls[0] - statistics.median(steady))
                self._compile_fresh = False
        if self._cache_on:
            import cache_dit

            stats = cache_dit.summary(self.transformer, logging=False)
            report["cached_steps"] = len(stats[0].cached_steps) if stats else 0
        return report


class _SeenOps(TorchDispatchMode):
    """Records the aten ops run inside it (to name the SDPA kernel chosen)."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))

    def attention(self) -> str:
        for op, name in _ATTENTION_OPS.items():
            if op in self.names:
                return name
        return "math"
