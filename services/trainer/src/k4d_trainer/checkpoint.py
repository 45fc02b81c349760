"""Resumable state with torch.distributed.checkpoint, to file:// or s3:// through fsspec.

Layout under RUN_URI/checkpoints/:

    step-00000040/           DCP shards + .metadata (every rank writes its own)
    step-00000040/COMMITTED  written by rank 0 after every rank finished: only committed
                             checkpoints count
    latest.json              {"step": 40, "path": "step-00000040"}, rewritten after a commit:
                             resuming reads one small object instead of listing folders

The state is one dict of Stateful parts: the model's trainable parameters (frozen base
weights are rebuilt from the recipe; torchtitan saves everything, we skip 14B of frozen
weights), the optimizer, the lr schedule, the data position and step counters, and the
RNG state. DCP reshards on load, so a run resumes on another world size.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import torch
import torch.distributed.checkpoint as dcp
from k4d.errors import FailedPrecondition, NotFound
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from k4d_trainer.runs import RunDir

COMMIT_MARKER = "COMMITTED"
LATEST = "latest.json"
FOLDER = "checkpoints"


def step_folder(step: int) -> str:
    return f"step-{step:08d}"


class ModelOptimizerState(Stateful):
    """Trainable model parameters + optimizer, through DCP's state-dict helpers (which
    handle DDP prefixes and FSDP2 DTensors alike)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer
        self.options = StateDictOptions(ignore_frozen_params=True)

    def state_dict(self) -> dict:
        model_state, optim_state = get_state_dict(self.model, self.optimizer, options=self.options)
        return {"model": model_state, "optim": optim_state}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"],
                       options=StateDictOptions(ignore_frozen_params=True, strict=False))


class RngState(Stateful):
    """The CPU (and CUDA) generator states of rank 0, restored on every rank. The training
    draws are seeded per sample (k4d_trainer.objective), so this only keeps any other
    randomness (dropout, if a model had it) reproducible."""

    def state_dict(self) -> dict:
        buffer = io.BytesIO()
        state = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state()
        torch.save(state, buffer)
        return {"rng": buffer.getvalue()}

    def load_state_dict(self, state: dict) -> None:
        loaded = torch.load(io.BytesIO(state["rng"]), weights_only=True)
        torch.set_rng_state(loaded["cpu"])
        if "cuda" in loaded and torch.cuda.is_available():
            torch.cuda.set_rng_state(loaded["cuda"])


@dataclass
class CheckpointInfo:
    step: int
    uri: str


class Checkpointer:
    """Save / find / load checkpoints of one run. Every rank calls `save` and `load`."""

    def __init__(self, run: RunDir, rank: int, keep: int = 3):
        self.run, self.rank, self.keep = run, rank, keep

    def uri_for(self, step: int) -> str:
        return self.run.child(f"{FOLDER}/{step_folder(step)}")

    def save(self, step: int, state: dict, barrier) -> CheckpointInfo:
        uri = self.uri_for(step)
        dcp.save(state, storage_writer=self._writer(uri))
        barrier()  # every rank's shards are written before the commit marker
        if self.rank == 0:
            name = f"{FOLDER}/{step_folder(step)}"
            self.run.write_bytes(f"{name}/{COMMIT_MARKER}", json.dumps({"step": step}).encode())
            self.run.write_bytes(f"{FOLDER}/{LATEST}",
                                 json.dumps({"step": step, "path": step_folder(step)}).encode())
            self._prune(step)
        barrier()
        return CheckpointInfo(step, uri)

    def latest(self) -> CheckpointInfo | None:
        """The newest committed checkpoint, or None."""
        try:
            pointer = json.loads(self.run.read_bytes(f"{FOLDER}/{LATEST}"))
        except NotFound:
            return None
        name = f"{FOLDER}/{pointer['path']}"
        if not self.run.exists(f"{name}/{COMMIT_MARKER}"):
            return None
        return CheckpointInfo(int(pointer["step"]), self.run.child(name))

    def load(self, info: CheckpointInfo, state: dict) -> None:
        if not self.run.exists(f"{FOLDER}/{step_folder(info.step)}/{COMMIT_MARKER}"):
            raise FailedPrecondition(f"checkpoint {info.uri} is not committed")
        dcp.load(state, storage_reader=self._reader(info.uri))

    def holds(self, info: CheckpointInfo, key: str) -> bool:
        """Whether the checkpoint holds the state dict entry `key` (a part added to a run's
        state after this checkpoint was written, such as the weight average, is absent)."""
        metadata = self._reader(info.uri).read_metadata()
        return any(name == key or name.startswith(f"{key}.")
                   for name in metadata.state_dict_metadata)

    def _writer(self, uri: str):
        if uri.startswith("file://"):
            return dcp.FileSystemWriter(uri[len("file://"):])
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(uri, **self.run.storage_options)

    def _reader(self, uri: str):
        if uri.startswith("file://"):
            return dcp.FileSystemReader(uri[len("file://"):])
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(uri, **self.run.storage_options)

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep` committed checkpoints (0 = all)."""
        if self.keep == 0:
            return
        try:
            names = self.run.fs.ls(f"{self.run.path}/{FOLDER}", detail=False)
        except FileNotFoundError:
            return
        steps = sorted(int(n.rsplit("step-", 1)[1]) for n in names if "/step-" in n
                       and n.rsplit("step-", 1)[1].isdigit())
        for step in [s for s in steps if s < newest][: max(0, len(steps) - self.keep)]:
            self.run.remove(f"{FOLDER}/{step_folder(step)}")
