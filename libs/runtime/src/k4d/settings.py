"""One typed settings object for every K4D_* environment variable (ADR 022).

`current()` reads the environment on every call (a snapshot; building it costs microseconds),
so tests that monkeypatch the environment see their values. Each section is a frozen
dataclass whose fields are declared with `k4d.config.setting` (variable, type, default,
one-line description) and is parsed when first asked for, so a malformed value fails, with
one line naming the variable, in the process that uses it and not in every process:

    settings = current()
    settings.runtime.grpc_port        # k4d.config.Config (services: load_config(service))
    settings.generator.backend        # "torch" | "onnx" | "tensorrt"

docs/configuration.md lists every variable; tests/contract/test_settings_documented.py
checks that list against `variables()` and that no code reads a K4D_* variable from the
environment anywhere else. Setting variables for a child process is not reading: allowed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from k4d.config import Config, float_at_least, load_config, parse_section, setting, type_name
from k4d.errors import InvalidArgument
from k4d.sampling import PROFILES as SAMPLING_PROFILES

GENERATOR_BACKENDS = ("torch", "onnx", "tensorrt")
TRAINER_LAUNCHERS = ("local", "kubernetes")


def _parse_nproc(name: str, raw: str) -> str:
    value = raw.strip()
    if value not in ("gpu", "cpu", "auto") and not value.isdigit():
        raise InvalidArgument.for_field(name, f"gpu, cpu, auto or a count, got {raw[:100]!r}")
    return value


@dataclass(frozen=True)
class ModelSettings:
    """The model a command runs when none is named (`k4d simulate`, `k4d up`, policy worlds)."""

    default_model: str = setting("K4D_DEFAULT_MODEL", "",
                                 "static-world, a registry reference or a shipped-model folder")


@dataclass(frozen=True)
class GeneratorSettings:
    """`k4d serve generator`: the start-up model and how it runs."""

    model: str = setting("K4D_GENERATOR_MODEL", "", "model loaded at start-up; empty = none")
    backend: str = setting("K4D_GENERATOR_BACKEND", "torch", "backend of the start-up model",
                           choices=GENERATOR_BACKENDS)
    precision: str = setting("K4D_GENERATOR_PRECISION", "",
                             "fp32, bf16 or fp16; empty = the backend's default")
    device: str = setting("K4D_GENERATOR_DEVICE", "cpu", "torch device, e.g. cuda")
    cache_dir: str = setting("K4D_GENERATOR_CACHE_DIR", "",
                             "ONNX exports, TensorRT engines; empty = ~/.cache/k4d/generator")
    profile: str = setting("K4D_GENERATOR_PROFILE", "",
                           "sampling profile under every request's options (k4d.sampling); "
                           "empty = the model's", choices=("", *SAMPLING_PROFILES))


@dataclass(frozen=True)
class SimulatorSettings:
    """`k4d serve simulator`."""

    default_model: str = setting("K4D_SIMULATOR_DEFAULT_MODEL", "",
                                 "[registry:]NAME[/VERSION] for specs that name no model")


def _default_work_dir() -> Path:
    return Path.home() / ".k4d" / "trainer"


@dataclass(frozen=True)
class TrainerSettings:
    """`k4d serve trainer`: the control plane that launches training runs."""

    launcher: str = setting("K4D_TRAINER_LAUNCHER", "local", "how runs are launched",
                            choices=TRAINER_LAUNCHERS)
    work_dir: Path = setting("K4D_TRAINER_WORK_DIR", doc="local launcher: configs and logs",
                             default_factory=_default_work_dir)
    poll_s: float = setting("K4D_TRAINER_POLL_S", 2.0, "how often run status is read",
                            parse=float_at_least(0.05))
    max_restarts: int = setting("K4D_TRAINER_MAX_RESTARTS", 2,
                                "relaunches of a run that died without a final status")
    cancel_grace_s: float = setting("K4D_TRAINER_CANCEL_GRACE_S", 120.0,
                                    "time a cancelled run gets to checkpoint and stop")
    namespace: str = setting("K4D_TRAINER_NAMESPACE", "",
                             "kubernetes: PyTorchJob namespace; empty = the pod's, else k4d")
    image: str = setting("K4D_TRAINER_IMAGE", "k4d/trainer:gpu",
                         "kubernetes: image of the training pods")
    nproc_per_node: str = setting("K4D_TRAINER_NPROC_PER_NODE", "gpu",
                                  "kubernetes: torchrun processes per pod", parse=_parse_nproc)


@dataclass(frozen=True)
class TrainRunSettings:
    """`k4d train`: set by whoever starts a run (the trainer's launchers, `k4d train` itself)."""

    job_id: str = setting("K4D_TRAIN_JOB_ID", "", "the trainer job this run belongs to")
    launcher_pid: int | None = setting("K4D_TRAIN_LAUNCHER_PID", None,
                                       "internal: the `k4d train` process the agent dies with")
    agent_pid: int | None = setting("K4D_TRAIN_AGENT_PID", None,
                                    "internal: the torchrun agent its workers die with")
    stop_grace_s: float = setting("K4D_TRAIN_STOP_GRACE_S", 90.0,
                                  "time the ranks of `k4d train --nproc N` get to checkpoint "
                                  "and stop after a SIGTERM (torchrun alone gives 30 s)",
                                  parse=float_at_least(0.0))


@dataclass(frozen=True)
class DevSettings:
    """Tests and developer tools only."""

    kubectl: str = setting("K4D_KUBECTL", "", "kubectl binary of the manifest checks")
    write_golden: bool = setting("K4D_WRITE_GOLDEN", False,
                                 "tests: rewrite the policy contract's golden file")
    fuzz_calls: int = setting("K4D_FUZZ_CALLS", 100, "tests: fuzz calls per RPC method")
    fuzz_seed: int = setting("K4D_FUZZ_SEED", 9, "tests: seed of the fuzz run")


# section name -> its dataclass; `Settings` has one attribute per entry.
SECTIONS: dict[str, type] = {
    "runtime": Config, "models": ModelSettings, "generator": GeneratorSettings,
    "simulator": SimulatorSettings, "trainer": TrainerSettings, "train": TrainRunSettings,
    "dev": DevSettings,
}


class _Section:
    """A `Settings` attribute: its section parsed from the snapshot on first access."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, settings: Settings | None, owner: type | None = None):
        if settings is None:
            return self
        value = parse_section(SECTIONS[self.name], settings._env)
        settings.__dict__[self.name] = value  # later reads skip the descriptor
        return value


class Settings:
    """Every section, each parsed from one snapshot of the environment on first access."""

    models: ModelSettings = _Section()
    generator: GeneratorSettings = _Section()
    simulator: SimulatorSettings = _Section()
    trainer: TrainerSettings = _Section()
    train: TrainRunSettings = _Section()
    dev: DevSettings = _Section()

    def __init__(self, env: Mapping[str, str]):
        self._env = dict(env)

    @cached_property
    def runtime(self) -> Config:
        """Without a service's ports and name; a service calls `load_config(service)`."""
        return load_config(env=self._env)


def current(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of this environment (os.environ unless `env` is given), read now."""
    return Settings(os.environ if env is None else env)


@dataclass(frozen=True)
class Variable:
    """One documented variable: where it lands and what docs/configuration.md says of it."""

    name: str
    field: str  # "section.field", the attribute path from `current()`
    type: str   # str, int, float, bool, Path or enum
    doc: str


def variables() -> dict[str, Variable]:
    """Every variable the settings read, by name."""
    out: dict[str, Variable] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            for var in f.metadata.get("env", ()):
                out[var] = Variable(var, f"{section}.{f.name}", type_name(cls, f),
                                    f.metadata["doc"])
    return out
