"""TensorRT backend: an engine built from the exported ONNX graph (FP16 or FP32), one
optimisation profile with a dynamic batch of 1..2, engines cached under
`cache_dir/trt/<model_id>_<shape>_<gpu>_<precision>.engine`.

No FP8: TensorRT runs FP8 kernels only where the graph carries explicit FP8
quantize/dequantize nodes with calibrated scales (e.g. from NVIDIA ModelOpt), which our
export does not produce. Setting the builder's FP8 flag without them yields an FP16
engine, so `fp8` is refused (InvalidArgument on `precision`) rather than mislabelled.

Without a CUDA GPU or without the `tensorrt` package, construction raises
FailedPrecondition naming what is missing; nothing here imports tensorrt before that.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from k4d.errors import FailedPrecondition, InvalidArgument

from k4d_generator.backends.availability import is_tensorrt_available
from k4d_generator.backends.onnx_backend import onnx_cache_path
from k4d_generator.backends.onnx_export import (
    INPUT_NAMES,
    OUTPUT_NAME,
    export_denoiser,
    export_example,
    shape_key,
)

PRECISIONS = ("fp16", "fp32")
_WORKSPACE_BYTES = 8 * 1024**3


def check_precision(precision: str) -> None:
    """InvalidArgument on `precision` unless the TensorRT backend really runs it."""
    if precision == "fp8":
        raise InvalidArgument.for_field(
            "precision", "tensorrt fp8 is not supported: the exported graph has no explicit "
                         "FP8 quantize/dequantize nodes, so an 'fp8' engine would run FP16; "
                         "use fp16")
    if precision not in PRECISIONS:
        raise InvalidArgument.for_field("precision", f"tensorrt precision must be one of "
                                                     f"{PRECISIONS}")


def check_tensorrt_usable(precision: str = "fp16") -> None:
    """Raise InvalidArgument for a precision the backend does not run, FailedPrecondition
    unless a CUDA GPU and the tensorrt package are present."""
    check_precision(precision)
    if not torch.cuda.is_available():
        raise FailedPrecondition("the tensorrt backend needs a CUDA GPU (torch sees none); use "
                                 "--backend torch or onnx on this machine")
    if not is_tensorrt_available():
        raise FailedPrecondition("the tensorrt backend needs the tensorrt package: "
                                 "pip install 'k4d-generator[gpu]' (tensorrt, onnxruntime-gpu)")


def engine_cache_path(cache_dir: str | Path, model_id: str, shape_key: str, precision: str
                      ) -> Path:
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", torch.cuda.get_device_name()).strip("-")
    return Path(cache_dir) / "trt" / f"{model_id}_{shape_key}_{gpu}_{precision}.engine"


class TensorRTBackend:
    name = "tensorrt"

    def __init__(self, transformer, cache_dir: str | Path, model_id: str,
                 precision: str = "fp16"):
        check_tensorrt_usable(precision)
        import tensorrt as trt

        self._trt = trt
        self._logger = trt.Logger(trt.Logger.WARNING)
        self.transformer = transformer
        self.cache_dir = Path(cache_dir)
        self.model_id = model_id
        self.precision = precision
        self._contexts: dict[str, tuple] = {}

    def _build_engine(self, onnx_path: Path, inputs: tuple[torch.Tensor, ...]) -> bytes:
        trt = self._trt
        builder = trt.Builder(self._logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise FailedPrecondition(f"TensorRT could not parse {onnx_path.name}: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, _WORKSPACE_BYTES)
        if self.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        profile = builder.create_optimization_profile()
        for name, tensor in zip(INPUT_NAMES, inputs, strict=True):
            rest = tuple(tensor.shape[1:])
            profile.set_shape(name, (1, *rest), (tensor.shape[0], *rest), (2, *rest))
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise FailedPrecondition("TensorRT engine build failed (see the TensorRT log)")
        return bytes(serialized)

    def _context_for(self, inputs: tuple[torch.Tensor, ...]):
        key = shape_key(inputs[0])
        if key not in self._contexts:
            engine_path = engine_cache_path(self.cache_dir, self.model_id, key, self.precision)
            if not engine_path.exists():
                onnx_path = onnx_cache_path(self.cache_dir, self.model_id, key)
                if not onnx_path.exists():
                    export_denoiser(self.transformer.cpu(), export_example(inputs), onnx_path)
                engine_path.parent.mkdir(parents=True, exist_ok=True)
                engine_path.write_bytes(self._build_engine(onnx_path, inputs))
            runtime = self._trt.Runtime(self._logger)
            engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
            self._contexts[key] = (runtime, engine, engine.create_execution_context())
        return self._contexts[key][2]

    @torch.no_grad()
    def __call__(self, hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain):
        inputs = tuple(x.float().cuda().contiguous() for x in
                       (hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain))
        context = self._context_for(inputs)
        for name, tensor in zip(INPUT_NAMES, inputs, strict=True):
            context.set_input_shape(name, tuple(tensor.shape))
            context.set_tensor_address(name, tensor.data_ptr())
        output = torch.empty(tuple(context.get_tensor_shape(OUTPUT_NAME)), device="cuda",
                             dtype=torch.float32)
        context.set_tensor_address(OUTPUT_NAME, output.data_ptr())
        stream = torch.cuda.current_stream()
        if not context.execute_async_v3(stream.cuda_stream):
            raise FailedPrecondition("TensorRT execution failed")
        stream.synchronize()
        return output

    def describe(self) -> dict:
        return {"backend": self.name, "precision": self.precision, "device": "cuda",
                "gpu": torch.cuda.get_device_name()}
