"""ONNX Runtime backend: CPU execution provider here, CUDA provider on a GPU machine.

The exported graph is cached under `cache_dir/<model_id>/<shape key>/denoiser.onnx`,
so a model is exported once per clip geometry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from k4d.errors import FailedPrecondition

from k4d_generator.backends.availability import is_onnxruntime_available
from k4d_generator.backends.onnx_export import (
    INPUT_NAMES,
    export_denoiser,
    export_example,
    shape_key,
)


def onnx_cache_path(cache_dir: str | Path, model_id: str, shape_key: str) -> Path:
    return Path(cache_dir) / model_id / shape_key / "denoiser.onnx"


class OnnxRuntimeBackend:
    name = "onnx"

    def __init__(self, transformer, cache_dir: str | Path, model_id: str,
                 device: str = "cpu", threads: int | None = None):
        if not is_onnxruntime_available():
            raise FailedPrecondition("the onnx backend needs onnxruntime, onnx and onnxscript: "
                                     "pip install 'k4d-generator[onnx]' (CPU) or "
                                     "'k4d-generator[gpu]' (CUDA)")
        import onnxruntime as ort

        self._ort = ort
        self.transformer = transformer
        self.cache_dir = Path(cache_dir)
        self.model_id = model_id
        self.device = device
        self.threads = threads
        self.providers = self._providers(device)
        self._sessions: dict[str, object] = {}

    def _providers(self, device: str) -> list[str]:
        available = self._ort.get_available_providers()
        if device.startswith("cuda"):
            if "CUDAExecutionProvider" not in available:
                raise FailedPrecondition("device cuda requested but onnxruntime has no "
                                         "CUDAExecutionProvider: pip install onnxruntime-gpu")
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    def session_for(self, inputs: tuple[torch.Tensor, ...]):
        """The ORT session for these input shapes (exporting on first use)."""
        key = shape_key(inputs[0])
        if key not in self._sessions:
            path = onnx_cache_path(self.cache_dir, self.model_id, key)
            if not path.exists():
                export_denoiser(self.transformer, export_example(inputs), path)
            options = self._ort.SessionOptions()
            # ORT's idle intra-op threads busy-spin by default; between denoiser calls that
            # steals the cores the VAE and scheduler (torch) need, so let them sleep.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            if self.threads:
                options.intra_op_num_threads = self.threads
            self._sessions[key] = self._ort.InferenceSession(
                str(path), sess_options=options, providers=self.providers)
        return self._sessions[key]

    def __call__(self, hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain):
        inputs = (hidden_states, timestep, image_embeds, arm_cond, arm_latent_gain)
        session = self.session_for(inputs)
        feeds = {name: np.ascontiguousarray(x.detach().float().cpu().numpy())
                 for name, x in zip(INPUT_NAMES, inputs, strict=True)}
        return torch.from_numpy(session.run(None, feeds)[0])

    def describe(self) -> dict:
        return {"backend": self.name, "precision": "fp32", "device": self.device,
                "providers": self.providers}
