"""Denoiser backends: ONNX Runtime matches torch fp32 within 1e-3 relative; TensorRT refuses
cleanly without a GPU (and runs when one is present); bad backend choices are clear errors."""

from __future__ import annotations

import pytest
import torch
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d_generator.backends import create_backend, is_tensorrt_available
from k4d_generator.backends.onnx_export import example_inputs
from k4d_model.checkpoints import load_model
from k4d_model.pipeline import model_id_of


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_gen_onnx_matches_torch_fp32(tiny_model_dir, onnx_cache):
    """Uses the session's tiny checkpoint and export cache (shared with the CLI test, so the
    tiny model is exported once per test session)."""
    components = load_model(tiny_model_dir, transformer_only=True)  # parity needs no VAE/CLIP
    model_id = model_id_of(components)
    transformer = components.transformer
    inputs = example_inputs(transformer, 2, 4, 6, batch=2)
    torch_backend = create_backend("torch", transformer)
    onnx_backend = create_backend("onnx", transformer, cache_dir=onnx_cache, model_id=model_id)
    for batch in (1, 2):  # dynamic batch: one-pass and batched two-pass guidance
        sliced = tuple(x[:batch] for x in inputs)
        assert _rel_err(onnx_backend(*sliced), torch_backend(*sliced)) < 1e-3
    assert (onnx_cache / model_id / "2x4x12" / "denoiser.onnx").is_file()
    assert onnx_backend.describe()["providers"] == ["CPUExecutionProvider"]


def test_gen_torch_bf16_is_close_to_fp32(make_tiny):
    components, _ = make_tiny("act")
    inputs = example_inputs(components.transformer, 2, 4, 6, batch=1)
    fp32 = create_backend("torch", components.transformer)(*inputs)
    bf16 = create_backend("torch", make_tiny("act")[0].transformer, precision="bf16")(*inputs)
    assert bf16.dtype == torch.float32
    assert _rel_err(bf16, fp32) < 0.1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gen_tensorrt_without_gpu_is_failed_precondition(make_tiny):
    with pytest.raises(FailedPrecondition, match="CUDA GPU"):
        create_backend("tensorrt", make_tiny("act")[0].transformer)


def test_gen_unknown_backend_and_precision_are_invalid(make_tiny):
    transformer = make_tiny("act")[0].transformer
    with pytest.raises(InvalidArgument, match="unknown backend"):
        create_backend("tvm", transformer)
    with pytest.raises(InvalidArgument, match="precision"):
        create_backend("torch", transformer, precision="int3")
    with pytest.raises(InvalidArgument, match="fp32"):
        create_backend("onnx", transformer, precision="fp16")


def test_gen_tensorrt_fp8_is_refused_not_mislabelled(make_tiny):
    """No explicit FP8 Q/DQ exists in our export: an "fp8" engine would be FP16 with a flag,
    so fp8 is InvalidArgument on precision (before any GPU check), never a mislabel."""
    from k4d_generator.backends.factory import check_backend_precision
    from k4d_generator.backends.tensorrt_backend import PRECISIONS

    with pytest.raises(InvalidArgument) as err:
        create_backend("tensorrt", make_tiny("act")[0].transformer, precision="fp8")
    assert err.value.violations[0].field == "precision"
    assert "fp8 is not supported" in err.value.violations[0].description
    with pytest.raises(InvalidArgument, match="fp8"):
        check_backend_precision("tensorrt", "fp8")
    assert "fp8" not in PRECISIONS


def test_gen_unparsable_device_is_invalid(make_tiny):
    with pytest.raises(InvalidArgument) as err:
        create_backend("torch", make_tiny("act")[0].transformer, device="foo")
    assert err.value.violations[0].field == "device"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not is_tensorrt_available(),
                    reason="needs a CUDA GPU and the tensorrt package")
def test_gen_tensorrt_fp16_matches_torch(make_tiny, tmp_path):
    components, _ = make_tiny("act")
    inputs = example_inputs(components.transformer, 2, 4, 6, batch=2)
    reference = create_backend("torch", make_tiny("act")[0].transformer)(*inputs)
    trt = create_backend("tensorrt", components.transformer, cache_dir=tmp_path,
                         model_id="tiny-act")
    assert _rel_err(trt(*inputs).cpu(), reference) < 2e-2
    assert list((tmp_path / "trt").glob("tiny-act_*_fp16.engine"))


def test_gen_exported_backends_refuse_a_model_that_reads_the_tool(make_tiny):
    """An exported graph has the five official inputs: a transformer with a tool condition
    runs on the torch backend only, and says so instead of dropping the condition."""
    transformer = make_tiny("act")[0].transformer
    transformer.add_tool_embedding(4)
    for name in ("onnx", "tensorrt"):
        with pytest.raises(FailedPrecondition, match="tool condition"):
            create_backend(name, transformer)
    inputs = example_inputs(transformer, 2, 4, 6, batch=1)
    out = create_backend("torch", transformer)(*inputs, tool_cond=torch.zeros(1, 2, 4))
    assert out.shape == (1, 16, 2, 4, 12)
