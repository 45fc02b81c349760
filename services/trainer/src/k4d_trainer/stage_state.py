"""Resumable state of a recipe's side stage (the VAE stage, the refiner stage): a stage
trained before or beside the transformer, with its own model, optimizer and schedule, that
saves every `checkpoint_every` steps and continues from the newest save when started again.

RUN/<folder>/: state.pt (rank 0: step, the stage's own fields, model, optimizer, scheduler
state), rng-<rank>.pt (each rank's sampling generator) and latest.json ({"step": N}) written
last, so a crash while saving leaves the previous state in force.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from k4d.errors import K4DError

from k4d_trainer.parallel import DistInfo, all_reduce_mean, barrier
from k4d_trainer.runs import RunDir

COMMITTED = "COMMITTED"


def save_stage_state(run: RunDir, folder: str, step: int, fields: dict, model, optimizer,
                     scheduler, generator: torch.Generator, info: DistInfo) -> None:
    """Every rank: its generator; rank 0: the rest, then latest.json."""
    rng = io.BytesIO()
    torch.save({"step": step, "generator": generator.get_state()}, rng)
    run.write_bytes(f"{folder}/rng-{info.rank}.pt", rng.getvalue())
    barrier(info)
    if info.is_main:
        state = io.BytesIO()
        torch.save({**fields, "step": step, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                   state)
        run.write_bytes(f"{folder}/state.pt", state.getvalue())
        run.write_bytes(f"{folder}/latest.json", json.dumps({"step": step}).encode())
    barrier(info)


def load_stage_state(run: RunDir, folder: str, model, generator: torch.Generator,
                     info: DistInfo, log, what: str) -> dict | None:
    """The saved state (model weights loaded, this rank's generator restored), with `step`,
    `optimizer`, `scheduler` and the stage's own fields; None when there is none."""
    if not run.exists(f"{folder}/latest.json"):
        return None
    step = int(json.loads(run.read_bytes(f"{folder}/latest.json"))["step"])
    state = torch.load(io.BytesIO(run.read_bytes(f"{folder}/state.pt")),
                       map_location=info.device, weights_only=False)
    if int(state["step"]) != step:
        raise K4DError(f"{run.child(folder)}: state.pt holds step {state['step']} but "
                       f"latest.json says {step}; remove the folder to restart the {what}")
    model.load_state_dict(state["model"])
    rng_name = f"{folder}/rng-{info.rank}.pt"
    rng = (torch.load(io.BytesIO(run.read_bytes(rng_name)), weights_only=False)
           if run.exists(rng_name) else None)
    if rng is not None and int(rng["step"]) == step:
        generator.set_state(rng["generator"])
    else:  # another world size than the saving run's: a fresh, still deterministic stream
        generator.manual_seed(generator.initial_seed() * 1_000_003 + step)
    log(f"{what}: resumed at step {step}")
    return state


def average_gradients(model: torch.nn.Module, info: DistInfo) -> None:
    """Data parallelism for a small side model: replicas start identical (same seed) and
    average their gradients, as DDP would, without a wrapper around its forward."""
    if not info.distributed:
        return
    for param in model.parameters():
        if param.grad is not None:
            torch.distributed.all_reduce(param.grad)
            param.grad /= info.world_size


def side_step(loss: torch.Tensor, model: torch.nn.Module, optimizer, scheduler,
              info: DistInfo) -> float:
    """One optimizer step of a side stage on `loss`: backward, gradients averaged over
    ranks, step, schedule; -> the loss averaged over ranks."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    average_gradients(model, info)
    optimizer.step()
    scheduler.step()
    return all_reduce_mean(float(loss.detach()), info)


def commit_network(run: RunDir, folder: str, save: Callable[[object, str], Path],
                   network) -> None:
    """Rank 0: a side stage's finished network in RUN/<folder>/ (`save(network, directory)`
    writes the model directory's layout, directory/<folder>/), the COMMITTED marker last; an
    earlier commit is withdrawn first, so a crash while writing leaves none."""
    run.remove(f"{folder}/{COMMITTED}")
    with tempfile.TemporaryDirectory(prefix=f"k4d-{folder}-") as tmp:
        written = save(network, tmp)
        for path in sorted(Path(written).iterdir()):
            run.put_file(str(path), f"{folder}/{path.name}")
    run.write_bytes(f"{folder}/{COMMITTED}", b"{}")


def load_committed(run: RunDir, folder: str, load: Callable[[str], object]):
    """The network committed in RUN/<folder>/ (`load(directory)` reads directory/<folder>/),
    or None."""
    if not run.exists(f"{folder}/{COMMITTED}"):
        return None
    with tempfile.TemporaryDirectory(prefix=f"k4d-{folder}-") as tmp:
        run.fs.get(f"{run.path}/{folder}/", str(Path(tmp) / folder) + "/", recursive=True)
        return load(tmp)


def log_side_steps(log, name: str, done: int, total: int, losses: list[float],
                   recent: list[dict], scheduler, every: int, digits: int = 4) -> list[dict]:
    """Every `every` steps and at the last: one line with the step's loss, the loss parts'
    means over the steps since the last line and the lr. Returns the parts still to report
    (`recent`, or none after a line)."""
    if done % every and done != total:
        return recent
    means = ", ".join(f"{key} {sum(p[key] for p in recent) / len(recent):.{digits}f}"
                      for key in recent[0])
    log(f"{name} step {done}/{total} loss {losses[-1]:.{digits}f} ({means}, last "
        f"{len(recent)} steps) lr {scheduler.get_last_lr()[0]:.2e}")
    return []


def save_stage_state_when_due(run: RunDir | None, every: int, done: int, total: int,
                              folder: str, losses: list[float], model, optimizer, scheduler,
                              generator: torch.Generator, info: DistInfo) -> None:
    """save_stage_state every `every` steps (0: never) and at the last, with a run."""
    if run is not None and every and (done % every == 0 or done == total):
        save_stage_state(run, folder, done, {"losses": losses}, model, optimizer, scheduler,
                         generator, info)
