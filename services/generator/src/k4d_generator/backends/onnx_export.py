"""Export of the denoiser (LoRA already fused) to ONNX with `torch.onnx.export(dynamo=True)`.

The graph takes the five denoiser inputs with a dynamic batch dimension (1 for the
one-pass guidance, 2 for batched two-pass guidance) and static clip geometry: the
arm-token grid is part of the checkpoint, so frames and resolution are fixed per model.
Models over 2 GB are saved with external data next to the .onnx file.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

INPUT_NAMES = ("hidden_states", "timestep", "image_embeds", "arm_cond", "arm_latent_gain")
OUTPUT_NAME = "velocity"
OPSET = 18
_PROTOBUF_LIMIT = 2 * 1024**3


class _Denoiser(torch.nn.Module):
    """Positional-argument wrapper: ONNX export needs a plain tensor-in, tensor-out forward."""

    def __init__(self, transformer):
        super().__init__()
        self.transformer = transformer

    def forward(self, hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain):
        return self.transformer(hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain,
                                return_dict=False)[0]


@contextlib.contextmanager
def float32_rope(transformer):
    """TensorRT has no float64: export the RoPE tables as float32 (as diffusers keeps them
    for low-precision models); restored afterwards."""
    rope = transformer.rope
    saved = {n: b for n, b in rope.named_buffers()}
    for name, buffer in saved.items():
        setattr(rope, name, buffer.float())
    try:
        yield
    finally:
        for name, buffer in saved.items():
            setattr(rope, name, buffer)


def example_inputs(transformer, latent_frames: int, latent_height: int, latent_width: int,
                   batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Dummy float32 inputs of the right shapes; latent_width is ONE modality's width."""
    cfg = transformer.config
    arm_width = 2 * latent_width if cfg.variant == "act" else latent_width
    image_dim = cfg.image_dim
    return (torch.randn(batch, cfg.in_channels, latent_frames, latent_height, 2 * latent_width),
            torch.full((batch,), 500.0),
            torch.randn(batch, cfg.num_image_tokens, image_dim),
            torch.randn(batch, transformer.mask_channels + cfg.out_channels, latent_frames,
                        latent_height, arm_width),
            torch.ones(batch))


def shape_key(hidden_states: torch.Tensor) -> str:
    """Cache key of a clip geometry: the latent (frames, height, width) of the model input."""
    return "x".join(str(s) for s in hidden_states.shape[2:])


def export_example(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The export example for a call's inputs: the first sample of each, repeated to batch 2
    (the graph's largest batch), as float32 on the CPU."""
    return tuple(x[:1].expand(2, *x.shape[1:]).contiguous().float().cpu() for x in inputs)


def export_denoiser(transformer, inputs: tuple[torch.Tensor, ...], path: str | Path,
                    max_batch: int = 2) -> Path:
    """Export to `path` (parent directories created). Returns the .onnx path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    transformer = transformer.float().eval()
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    dynamic = tuple({0: batch} for _ in INPUT_NAMES)
    size = sum(p.numel() * p.element_size() for p in transformer.parameters())
    with torch.no_grad(), float32_rope(transformer):
        program = torch.onnx.export(_Denoiser(transformer), inputs, dynamo=True,
                                    opset_version=OPSET, dynamic_shapes=dynamic,
                                    input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME])
    program.save(str(path), external_data=size > _PROTOBUF_LIMIT)
    return path
