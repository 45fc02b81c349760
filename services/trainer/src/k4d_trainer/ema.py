"""An exponential moving average of the trainable weights (`training.ema_decay`, issue 45).

The demo transformer trains on batches of 4 and underfits: each weight update is noisy,
and the weights that sample best are an average over the last steps, not the last step's
(as diffusion models are usually published). The averaging itself is diffusers'
`EMAModel`. Its decay warms up as `(1 + n) / (10 + n)` (capped at `ema_decay`) so that a
random start soon leaves the average; that warm-up also shortens the average to ~300
steps at n = 2400 whatever the decay, so a stage that starts from a trained `model.init`
turns it off (`training.ema_warmup: false`, the decay held from the second update). This
module adds what the trainer needs around it:

- `EmaState`: the average as a DCP Stateful (named tensors, so a checkpoint reshards it
  like the weights, FSDP2 DTensors included);
- `swapped_in`: sample or publish with the averaged weights, then train on.

A run publishes and samples its rollouts with the average; its checkpoints hold both, and
`demo_model.py export --weights raw` still reads the last step's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from diffusers.training_utils import EMAModel
from torch.distributed.checkpoint.stateful import Stateful

STATE_KEY = "ema"  # the trainer's state dict key, hence the checkpoint's "ema.*" entries


class EmaState(Stateful):
    """The moving average of `named` parameters (name -> Parameter), updated by `update`
    after every optimizer step."""

    def __init__(self, named: dict[str, torch.nn.Parameter], decay: float,
                 warmup: bool = True):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema decay must be in (0, 1), got {decay}")
        self.names = list(named)
        self.parameters = list(named.values())
        # EMAModel takes the larger of its warmed-up decay and min_decay: min_decay = decay
        # holds the decay from the second update (its first copies the weights)
        self.average = EMAModel(self.parameters, decay=decay,
                                min_decay=0.0 if warmup else decay)

    @property
    def updates(self) -> int:
        return self.average.optimization_step

    def update(self) -> None:
        self.average.step(self.parameters)

    def restart_from_weights(self) -> None:
        """Start the average again from the current weights (a run that resumes from a
        checkpoint written without one)."""
        with torch.no_grad():
            for shadow, param in zip(self.average.shadow_params, self.parameters, strict=True):
                shadow.copy_(param)
        self.average.optimization_step = 0

    def copy_to_weights(self) -> None:
        """Make the average the weights for good (the end of training)."""
        self.average.copy_to(self.parameters)

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The averaged weights in place of the trained ones, for the block's duration."""
        saved = [param.detach().clone() for param in self.parameters]
        self.average.copy_to(self.parameters)
        try:
            yield
        finally:
            with torch.no_grad():
                for param, value in zip(self.parameters, saved, strict=True):
                    param.copy_(value)

    def state_dict(self) -> dict:
        return {"updates": self.average.optimization_step,
                "weights": dict(zip(self.names, self.average.shadow_params, strict=True))}

    def load_state_dict(self, state: dict) -> None:
        self.average.optimization_step = int(state["updates"])
        with torch.no_grad():
            for name, shadow in zip(self.names, self.average.shadow_params, strict=True):
                loaded = state["weights"][name]
                if loaded is not shadow:  # DCP loads in place; a plain dict may not
                    shadow.copy_(loaded)
