"""Trainer control-plane settings, read once at start-up from env vars (docs/configuration.md):

  K4D_TRAINER_LAUNCHER       local (default: `k4d train` subprocesses) | kubernetes (PyTorchJob)
  K4D_TRAINER_WORK_DIR       local launcher: run configs and logs (default ~/.k4d/trainer)
  K4D_TRAINER_POLL_S         how often running jobs' status.json is read (default 2)
  K4D_TRAINER_MAX_RESTARTS   relaunches (with --resume) of a run that died without a final
                             status (default 2)
  K4D_TRAINER_CANCEL_GRACE_S how long a cancelled run may take to checkpoint and stop before
                             it is terminated (default 120)
  K4D_TRAINER_NAMESPACE      kubernetes: namespace of the PyTorchJobs (default: the pod's own)
  K4D_TRAINER_IMAGE          kubernetes: image of the training pods (default k4d/trainer:gpu)
  K4D_TRAINER_NPROC_PER_NODE kubernetes: torchrun processes per pod (default gpu)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from k4d.errors import InvalidArgument

LAUNCHERS = ("local", "kubernetes")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class TrainerSettings:
    launcher: str = "local"
    work_dir: Path = Path.home() / ".k4d" / "trainer"
    poll_s: float = 2.0
    max_restarts: int = 2
    cancel_grace_s: float = 120.0
    namespace: str = "k4d"
    image: str = "k4d/trainer:gpu"
    nproc_per_node: str = "gpu"


def _float(name: str, raw: str, low: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= low):
        raise InvalidArgument.for_field(name, f"expected a number >= {low:g}, got {raw!r}")
    return value


def load_settings(env: Mapping[str, str] | None = None) -> TrainerSettings:
    env = os.environ if env is None else env
    defaults = TrainerSettings()
    launcher = env.get("K4D_TRAINER_LAUNCHER", "") or defaults.launcher
    if launcher not in LAUNCHERS:
        raise InvalidArgument.for_field("K4D_TRAINER_LAUNCHER",
                                        f"one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    restarts = env.get("K4D_TRAINER_MAX_RESTARTS", "")
    if restarts and not restarts.isdigit():
        raise InvalidArgument.for_field("K4D_TRAINER_MAX_RESTARTS", f"expected an integer >= 0, "
                                                                    f"got {restarts!r}")
    namespace = env.get("K4D_TRAINER_NAMESPACE", "")
    if not namespace:
        try:
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            namespace = defaults.namespace
    nproc = env.get("K4D_TRAINER_NPROC_PER_NODE", "") or defaults.nproc_per_node
    if nproc not in ("gpu", "cpu", "auto") and not nproc.isdigit():
        raise InvalidArgument.for_field("K4D_TRAINER_NPROC_PER_NODE",
                                        f"gpu, cpu, auto or a count, got {nproc!r}")
    return TrainerSettings(
        launcher=launcher,
        work_dir=Path(env.get("K4D_TRAINER_WORK_DIR", "") or defaults.work_dir).expanduser(),
        poll_s=_float("K4D_TRAINER_POLL_S", env["K4D_TRAINER_POLL_S"], 0.05)
        if env.get("K4D_TRAINER_POLL_S") else defaults.poll_s,
        max_restarts=int(restarts) if restarts else defaults.max_restarts,
        cancel_grace_s=_float("K4D_TRAINER_CANCEL_GRACE_S", env["K4D_TRAINER_CANCEL_GRACE_S"], 0.0)
        if env.get("K4D_TRAINER_CANCEL_GRACE_S") else defaults.cancel_grace_s,
        namespace=namespace,
        image=env.get("K4D_TRAINER_IMAGE", "") or defaults.image,
        nproc_per_node=nproc)
