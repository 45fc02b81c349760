"""Denoiser backends: they run the transformer's forward only; sampling stays in the pipeline.

Every backend is called as
    backend(hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain) -> (B, 16, F, h, 2w)
with float32 torch tensors in and out (see `Kinema4DTransformer3DModel.forward`); a model
with a tool condition is called with `tool_cond=` too, which only the torch backend takes
(the exported graphs have five inputs: the factory refuses such a model for them).

Optional heavy dependencies (onnxruntime, tensorrt) are probed once and imported only
when their backend is chosen.
"""

from __future__ import annotations

from k4d_generator.backends.availability import (
    is_onnxruntime_available,
    is_tensorrt_available,
    is_torch_cuda_available,
)
from k4d_generator.backends.factory import BACKENDS, create_backend

__all__ = ["BACKENDS", "create_backend", "is_onnxruntime_available", "is_tensorrt_available",
           "is_torch_cuda_available"]
