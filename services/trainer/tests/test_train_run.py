"""Training runs end to end on the tiny model (CPU):

- a single-process run publishes through the registry; the published model (our layout)
  and the official-layout export (fused at 0.5) reproduce the trainer's in-memory model;
  the version is announced on k4d.model.published;
- 2-process DDP and FSDP2 runs under torchrun give the single-process losses on the same
  global batches, and the loss falls clearly (overfitting two episodes);
- SIGKILL mid-run + --resume: the losses after the restart equal the uninterrupted run's;
- SIGTERM to the `--nproc 2` launcher reaches the torchrun workers (checkpoint, stop).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from k4d.bus import InProcessBus
from k4d.bus.topics import MODEL_PUBLISHED
from k4d.model_events import read_model_published
from k4d.store import LocalStore
from k4d.testing.bus import drain
from k4d.testing.processes import alive
from k4d_model import checkpoints, registry
from k4d_model.lora import read_lora
from k4d_trainer.config import load_config_file
from k4d_trainer.main import run_training
from k4d_trainer.objective import noise_batch, training_schedule
from k4d_trainer.runs import read_metrics, read_status
from k4d_trainer.trainer import Trainer

STEPS = 8


def _losses(run: Path) -> list[float]:
    return [m["loss"] for m in read_metrics(str(run))]


def _k4d(*argv: str, **kwargs) -> subprocess.Popen:
    # One thread per process in every run whose losses are compared: a CPU matmul's reduction
    # order follows the thread count, so bit-equal losses need equal counts (on an AMD EPYC,
    # 1 thread against the default differed in the 7th digit at step 4).
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "k4d.cli.main", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture(scope="module")
def overfit(tmp_path_factory, recipe, make_dataset, tiny_official):
    """The overfit recipe (2 episodes, global batch 2, lr 1e-2, deterministic algorithms) and
    its single-process reference run, which is also the uninterrupted run of the resume test.
    The reference is a `k4d train` subprocess exactly like the killed and resumed runs (same
    command, same OMP_NUM_THREADS=1), not a run in the pytest process with its own thread
    count, so "resume repeats the losses exactly" holds on any CPU."""
    root = tmp_path_factory.mktemp("overfit")
    data = make_dataset(root / "data", count=2)
    path = recipe(root, data, str(tiny_official),
                  data={"uri": data, "latents_uri": str(root / "latents")},
                  training={"steps": STEPS, "global_batch_size": 2, "lr": 1e-2,
                            "warmup_steps": 0, "deterministic": True},
                  checkpoint={"every": 2, "keep": 0})
    proc = _k4d("train", "--config", str(path), "--out", str(root / "reference"))
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    status = read_status(str(root / "reference"))
    assert status.state == "succeeded" and status.step == STEPS
    return path, _losses(root / "reference")


def test_single_process_loss_falls(overfit):
    _, losses = overfit
    assert len(losses) == STEPS
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2]), losses


@pytest.mark.parametrize("strategy, parallelism", [
    ("ddp", {"dp_replicate": -1, "dp_shard": 1}),
    ("fsdp2", {"dp_replicate": 1, "dp_shard": -1}),
])
def test_two_processes_match_single_process(tmp_path, overfit, strategy, parallelism):
    path, reference = overfit
    config = json.loads(Path(path).read_text())
    config["parallelism"] = parallelism
    config["checkpoint"] = {"every": STEPS // 2, "keep": 0}
    config["training"]["ema_decay"] = 0.8  # the average leaves the training alone
    recipe_file = tmp_path / f"{strategy}.json"
    recipe_file.write_text(json.dumps(config))
    run = tmp_path / "run"
    proc = _k4d("train", "--config", str(recipe_file), "--out", str(run), "--nproc", "2")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["state"] == "succeeded" and summary["step"] == STEPS
    losses = _losses(run)
    # Same global batches, same per-sample noise: the same losses up to float reordering.
    assert losses == pytest.approx(reference, rel=1e-4, abs=1e-5)
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2])
    assert (run / "checkpoints" / f"step-{STEPS:08d}" / "COMMITTED").exists()

    if strategy == "fsdp2":
        # Elastic: the 2-rank sharded checkpoint of the middle step resumes on one process
        # (DCP reshards; the data position is world-size free) and continues the same run.
        half = f"step-{STEPS // 2:08d}"
        elastic = tmp_path / "elastic"
        shutil.copytree(run / "checkpoints" / half, elastic / "checkpoints" / half)
        (elastic / "checkpoints" / "latest.json").write_text(
            json.dumps({"step": STEPS // 2, "path": half}))
        status = run_training(load_config_file(recipe_file), str(elastic), resume=True)
        assert status.state == "succeeded" and status.step == STEPS
        assert not torch.are_deterministic_algorithms_enabled()  # the run's flag is undone
        assert [m["step"] for m in read_metrics(str(elastic))] == list(range(STEPS // 2 + 1,
                                                                             STEPS + 1))
        assert _losses(elastic) == pytest.approx(reference[STEPS // 2:], rel=1e-4, abs=1e-5)
        # ... and so does the weight average, sharded on two ranks, one rank's from there
        last = f"step-{STEPS:08d}"
        two, one = (_saved_average(r / "checkpoints" / last, tmp_path / f"{r.name}.pt")
                    for r in (run, elastic))
        assert two["updates"] == one["updates"] == STEPS and two["weights"]
        for name, value in two["weights"].items():
            torch.testing.assert_close(one["weights"][name], value, rtol=1e-4, atol=1e-6)


def _saved_average(checkpoint: Path, scratch: Path) -> dict:
    """The weight average (k4d_trainer.ema) a DCP checkpoint holds, as full tensors."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(checkpoint), str(scratch))
    return torch.load(scratch, weights_only=False)["ema"]


def test_sigkill_then_resume_repeats_the_losses(tmp_path, overfit):
    path, reference = overfit
    run = tmp_path / "run"
    proc = _k4d("train", "--config", str(path), "--out", str(run))
    marker = run / "checkpoints" / "step-00000004" / "COMMITTED"
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()[1][-3000:] if proc.poll() is not None else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert read_status(str(run)).state == "running"  # killed: nobody wrote an end state
    killed_at = read_status(str(run)).step
    assert killed_at < STEPS

    resumed = _k4d("train", "--config", str(path), "--out", str(run), "--resume")
    out, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err[-3000:]
    status = read_status(str(run))
    assert status.state == "succeeded" and status.step == STEPS
    losses = _losses(run)
    assert [m["step"] for m in read_metrics(str(run))] == list(range(1, STEPS + 1))
    assert losses == reference  # exactly: same data position, same per-sample draws


def test_resume_refuses_to_overwrite_without_flag(tmp_path, overfit, capsys):
    from k4d.cli.main import main

    path, _ = overfit
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest.json").write_text('{"step": 2, "path": "step-00000002"}')
    assert main(["train", "--config", str(path), "--out", str(run)]) == 2
    assert "--resume" in capsys.readouterr().err.strip().splitlines()[-1]


def _forward(transformer, sample: dict, schedule) -> torch.Tensor:
    batch = {k: v[None] for k, v in sample.items()}
    noised = noise_batch(batch, [0], seed=5, schedule=schedule, soft_mask_ratio=0.0,
                         mask_channels=transformer.mask_channels)
    with torch.no_grad():
        return transformer(noised.model_input, noised.timestep, batch["image_embeds"],
                           noised.arm_cond, return_dict=False)[0]


def test_published_model_reproduces_the_trainer(tmp_path, recipe, episodes_dir, tiny_official):
    store_dir = tmp_path / "store"
    path = recipe(tmp_path, episodes_dir, str(tiny_official / "base"),
                  model={"base": str(tiny_official / "base"), "lora_rank": 4, "lora_alpha": 8,
                         "num_frames": 5, "height": 32, "width": 48, "arm_patch_size": [1, 2, 2],
                         "arm_bottleneck_dim": 16},
                  training={"steps": 3, "lr": 1e-2, "warmup_steps": 0},
                  publish={"name": "tiny-ft", "version": "7",
                           "store_uri": store_dir.as_uri()})
    bus = InProcessBus()
    trainer = Trainer.build(load_config_file(path), str(tmp_path / "run"), bus=bus)
    try:
        status = trainer.train()
    finally:
        trainer.close()
    assert status.state == "succeeded"
    assert status.published_model["name"] == "tiny-ft" and status.published_model["version"] == "7"
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "succeeded"
    for picture in ("loss.png", "lr.png"):
        assert (tmp_path / "run" / picture).stat().st_size > 1000

    sample = trainer.cache.load(trainer.sampler.episode_ids[0])
    schedule = training_schedule()
    in_memory = _forward(trainer.components.transformer.eval(), sample, schedule)
    assert in_memory.abs().max() > 0

    local = registry.fetch(LocalStore(store_dir), "tiny-ft", "7", tmp_path / "cache")
    ours = checkpoints.load_model(local)
    assert ours.info.lora["fused"] is False
    torch.testing.assert_close(_forward(ours.transformer, sample, schedule), in_memory,
                               rtol=1e-4, atol=1e-5)

    official_dir = local / "official" / "kinema4d"
    assert read_lora(official_dir / "pytorch_lora_weights.safetensors").alpha is None
    official = checkpoints.load_official(tiny_official / "base", official_dir, num_frames=5,
                                         height=32, width=48, lora_scale=0.5)
    torch.testing.assert_close(_forward(official.transformer, sample, schedule), in_memory,
                               rtol=1e-4, atol=1e-5)

    (message,) = drain(bus, MODEL_PUBLISHED, 1, timeout_s=5)
    event = read_model_published(message)
    assert (event.model.name, event.model.version) == ("tiny-ft", "7")
    assert event.model.uri == "registry:tiny-ft/7"


def _when_step(run: Path, step: int, action, timeout_s: float = 240) -> threading.Thread:
    """Run `action` once metrics.jsonl reaches `step` (from a helper thread)."""

    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            metrics = run / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= step:
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_sigterm_and_cancel_checkpoint_at_the_step_boundary(tmp_path, overfit):
    from k4d_trainer.runs import request_cancel

    path, _ = overfit
    config = load_config_file(path)
    config.training.steps = 200
    config.checkpoint.every = 0
    run = tmp_path / "run"
    watcher = _when_step(run, 2, lambda: os.kill(os.getpid(), signal.SIGTERM))
    status = run_training(config, str(run))
    watcher.join()
    assert status.state == "failed" and "SIGTERM" in status.error and "--resume" in status.error
    stopped = status.step
    assert 2 <= stopped < 200
    assert status.checkpoint_uri.endswith(f"step-{stopped:08d}")
    assert (run / "checkpoints" / f"step-{stopped:08d}" / "COMMITTED").exists()

    watcher = _when_step(run, stopped + 1, lambda: request_cancel(str(run)))
    status = run_training(config, str(run), resume=True)
    watcher.join()
    assert status.state == "cancelled" and stopped < status.step < 200
    assert read_status(str(run)).state == "cancelled"
    assert (run / "checkpoints" / f"step-{status.step:08d}" / "COMMITTED").exists()


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: the torchrun agent and its workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@contextlib.contextmanager
def _two_ranks_at_step(tmp_path: Path, path, step: int):
    """`k4d train --nproc 2` of the overfit recipe made to run until stopped (100,000 steps,
    checkpointing only when it stops), once it reached `step` -> (the launcher, the run
    directory, every process below the launcher). None is left running afterwards."""
    config = json.loads(Path(path).read_text())
    config["training"]["steps"] = 100_000
    config["checkpoint"] = {"every": 0, "keep": 0}
    recipe_file, run = tmp_path / "long.json", tmp_path / "run"
    recipe_file.write_text(json.dumps(config))
    proc = _k4d("train", "--config", str(recipe_file), "--out", str(run), "--nproc", "2")
    stepped = threading.Event()
    _when_step(run, step, stepped.set).join()
    below = _descendants(proc.pid)
    try:
        assert stepped.is_set(), proc.stderr.read()[-3000:] if proc.poll() is not None else ""
        assert len(below) >= 3, below  # the torchrun agent and two workers
        yield proc, run, below
    finally:  # never leave workers behind, whatever failed
        for pid in [proc.pid, *below]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_to_the_launcher_stops_its_torchrun_workers(tmp_path, overfit):
    """`k4d train --nproc 2` re-launches itself under torchrun: a SIGTERM to the command
    (a pod stop, a `kill`) must reach the workers, which checkpoint and stop, instead of
    ending the launcher alone and leaving them training."""
    with _two_ranks_at_step(tmp_path, overfit[0], 2) as (proc, run, below):
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in below if alive(pid)]
    status = read_status(str(run))
    assert status.state == "failed" and "SIGTERM" in status.error, stderr[-4000:]
    assert (run / "checkpoints" / f"step-{status.step:08d}" / "COMMITTED").exists()


def test_sigkill_of_the_launcher_takes_its_torchrun_workers_along(tmp_path, overfit):
    """torchrun starts its workers in sessions of their own: before the parent-death signals
    (k4d_trainer.lifeline), a SIGKILL of `k4d train --nproc 2` left the agent and both
    workers training, and they published a model. Nothing may be left 5 s after it."""
    with _two_ranks_at_step(tmp_path, overfit[0], 1) as (proc, run, below):
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(5)
        assert not [pid for pid in below if alive(pid)]
    assert read_status(str(run)).state == "running"  # killed: nobody wrote an end state
