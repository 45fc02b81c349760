"""Generation for `k4d eval run` and the static-world floor, through the public
`k4d simulate` command in subprocesses (no import of the simulator or generator packages:
the evaluator stays a consumer of the CLI contract, docs/adr/006-evaluator-package.md).

Each episode's inputs (first frame as PNG, camera JSON, actions JSON, robot) come from
the dataset; outputs go to OUT/<method>/<episode_id>/. A directory with summary.json
(written last by `k4d simulate`) is complete and is skipped when the run resumes, but only
when the same generation made it: OUT/<method>/generation.json records the model (by the
sha256 of its content, `model_sha256`), backend, steps and depth input, and a resumed run
with another model regenerates every rollout (an export of the same name and version with
other weights included)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.model_names import STATIC_WORLD

from k4d_eval.eval_runs import BASELINE, MODEL, eval_dataset, resolve_episodes
from k4d_eval.inputs import SIM_SUMMARY_JSON
from k4d_eval.report import write_json

PREDICTIONS_DIR = "predictions"
BASELINE_DIR = "static-world"
INPUTS_DIR = "inputs"
MODEL_FILE = "k4d_model.json"  # a k4d model directory's description (docs/generator.md)
MANIFEST_FILE = "manifest.json"  # a registry manifest: every file's path, size and sha256
GENERATION_JSON = "generation.json"  # OUT/<method>/: what made the rollouts beside it


def write_episode_inputs(dataset, episode_id: str, where: Path, depth: bool = False
                         ) -> dict[str, str]:
    """image.png, camera.json, actions.json (and depth.npy, the first frame's depth in
    metres, with `depth`: an RGB-D observation) of one episode -> `k4d simulate` arguments."""
    import numpy as np
    from PIL import Image

    meta = dataset.meta(episode_id)
    where.mkdir(parents=True, exist_ok=True)
    episode = dataset.open(episode_id)
    Image.fromarray(episode["rgb"][0:1][0]).save(where / "image.png")
    (where / "camera.json").write_text(json.dumps(meta.camera_at(0).to_dict()))
    (where / "actions.json").write_text(json.dumps(meta.actions))
    spec = {"--robot": meta.robot, "--image": str(where / "image.png"),
            "--camera": str(where / "camera.json"), "--actions": str(where / "actions.json"),
            "--frames": str(meta.frames), "--fps": str(meta.fps)}
    if depth:
        if "depth" not in episode.arrays:
            raise InvalidArgument.for_field("depth", f"episode {episode_id} has no depth to give")
        np.save(where / "depth.npy", np.asarray(episode.read("depth")[0], np.float32))
        spec["--depth"] = str(where / "depth.npy")
    return spec


def simulate(spec: dict[str, str], out: Path, *, model: str = "", backend: str = "",
             steps: int = 0) -> Path:
    """One `k4d simulate` run; a failure is FailedPrecondition with its error line."""
    if (out / SIM_SUMMARY_JSON).is_file():
        return out
    cmd = [sys.executable, "-m", "k4d.cli.main", "simulate", "--out", str(out), "--no-progress",
           "--viewer-points", "500"]
    for key, value in spec.items():
        cmd += [key, value]
    if model:
        cmd += ["--model", model]
    if backend:
        cmd += ["--backend", backend]
    if steps:
        cmd += ["--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and "invalid choice: 'simulate'" in proc.stderr:
        raise FailedPrecondition("generation runs `k4d simulate`, which is not installed here "
                                 "(pip install services/simulator/embedded); evaluate existing "
                                 "outputs with `k4d eval --pred DIR --gt URI` instead")
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise FailedPrecondition(f"`k4d simulate` failed for {out.name}: "
                                 f"{lines[-1] if lines else f'exit code {proc.returncode}'}")
    if model and _model_id(out) == STATIC_WORLD:
        # Never score the floor under a model's name (a model string simulate did not
        # resolve falls back to static-world); the directory stays incomplete.
        (out / SIM_SUMMARY_JSON).unlink()
        raise FailedPrecondition(f"`k4d simulate` failed for {out.name}: it ran the static-world "
                                 f"backend, not model {model!r} (no such model?)")
    return out


def _model_id(out: Path) -> str:
    try:
        return str(json.loads((out / SIM_SUMMARY_JSON).read_text())["model"]["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def model_clip_size(model: str) -> tuple[int, int, int] | None:
    """(frames, height, width) the model samples, read from a local k4d model directory's
    k4d_model.json (no model code is imported); None when the model is not a local
    directory (registry names, official checkpoints): `k4d simulate` checks those itself,
    at the first episode."""
    path = Path(model[len("file://"):] if model.startswith("file://") else model)
    try:
        meta = json.loads((path / MODEL_FILE).read_text())
        return int(meta["num_frames"]), int(meta["height"]), int(meta["width"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_clip_sizes(model: str, dataset, episode_ids: Sequence[str]) -> None:
    """Fail before any generation when an episode's clip is not the model's: the model
    samples one clip size, and the evaluator does not resample clips (the trainer's clip
    adaptation lives in the trainer package, which a service may not import)."""
    size = model_clip_size(model)
    if size is None:
        return
    frames, height, width = size
    for episode_id in episode_ids:
        meta = dataset.meta(episode_id)
        if (meta.frames, meta.height, meta.width) != size:
            raise InvalidArgument.for_field(
                "data", f"episode {episode_id} is {meta.frames} frames at {meta.width}x"
                        f"{meta.height}, but model {model} samples {frames} frames at "
                        f"{width}x{height}: evaluate data of the model's size (e.g. `k4d "
                        f"datagen synthetic --frames {frames} --height {height} --width "
                        f"{width}`) or a model trained for {meta.frames} frames at "
                        f"{meta.width}x{meta.height}")


def _local_model_dir(model: str) -> Path | None:
    if not model or ("://" in model and not model.startswith("file://")):
        return None
    path = Path(model.removeprefix("file://"))
    return path if path.is_dir() else None


def model_sha256(model: str) -> str | None:
    """The sha256 that identifies a local model's content, without loading it; None for a
    reference that is not a local directory (a registry name[/version]: registry versions
    are immutable).
    - A folder with a manifest.json (a shipped model such as models/demo-small, or a model
      fetched from the registry): the sha256 of the manifest's file list, every file's path,
      size and sha256 (its description or held-out figures may change, the model does not).
    - A k4d model directory: the sha256 of its k4d_model.json and of every other file's
      path, size and modification time (hashing a 14B model's weights on every run would
      cost minutes; rewriting a file changes its time)."""
    path = _local_model_dir(model)
    if path is None:
        return None
    digest = hashlib.sha256()
    if (path / MANIFEST_FILE).is_file():
        try:
            files = json.loads((path / MANIFEST_FILE).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            files = None
        if files is not None:
            digest.update(json.dumps(files, sort_keys=True).encode())
            return digest.hexdigest()
    if (path / MODEL_FILE).is_file():
        digest.update((path / MODEL_FILE).read_bytes())
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != MODEL_FILE):
        stat = file.stat()
        digest.update(f"{file.relative_to(path).as_posix()}\0{stat.st_size}\0"
                      f"{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def generation_record(model: str, backend: str, steps: int, depth: bool) -> dict:
    """What makes a rollout: the model (by content where it is a local directory), the
    backend, the sampler steps and whether the first frame's depth was given."""
    return {"model": model, "model_sha256": model_sha256(model) if model else None,
            "backend": backend, "steps": steps, "depth": depth}


def _same_generation(before: dict, now: dict) -> bool:
    if now["model_sha256"] is not None or before.get("model_sha256") is not None:
        same_model = before.get("model_sha256") == now["model_sha256"]  # moved or renamed: same
    else:
        same_model = before.get("model") == now["model"]
    return same_model and all(before.get(k) == now[k] for k in ("backend", "steps", "depth"))


def _describe(record: dict | None) -> str:
    if record is None:
        return "an unrecorded generation"
    parts = [f"model {record['model']}"] if record.get("model") else []
    if parts and record.get("model_sha256"):
        parts[-1] += f" (sha256 {record['model_sha256'][:12]})"
    parts += [f"{k} {record[k]}" for k in ("backend", "steps") if record.get(k)]
    return ", ".join([*parts, "RGB-D input" if record.get("depth") else "RGB input"])


def start_generation(root: Path, record: dict) -> None:
    """Reuse the rollouts under `root` only when `record` made them; otherwise remove them
    (one line says why) so every episode is generated again. Then record `record`."""
    stamp = root / GENERATION_JSON
    rollouts = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    if rollouts:
        try:
            before = json.loads(stamp.read_text())
        except (OSError, ValueError):
            before = None
        before = before if isinstance(before, dict) else None  # unrecorded or damaged
        if before is None or not _same_generation(before, record):
            print(f"k4d eval: {root} holds rollouts of {_describe(before)}, not of "
                  f"{_describe(record)}: generating all {len(rollouts)} again", flush=True)
            for path in rollouts:
                shutil.rmtree(path)
    root.mkdir(parents=True, exist_ok=True)
    write_json(stamp, record)


def generate(dataset, episode_ids: Sequence[str], out: Path, method_dir: str, *,
             model: str = "", backend: str = "", steps: int = 0, workers: int = 1,
             progress: bool = True, depth: bool = False) -> Path:
    """Every episode's rollout under out/method_dir/<episode_id>/ (parallel, resumable:
    rollouts of the same generation are kept, those of another are made again)."""
    from tqdm import tqdm

    root = out / method_dir
    start_generation(root, generation_record(model, backend, steps, depth))
    todo = [e for e in episode_ids if not (root / e / SIM_SUMMARY_JSON).is_file()]
    specs = {e: write_episode_inputs(dataset, e, out / INPUTS_DIR / e, depth) for e in todo}
    with tqdm(total=len(episode_ids), initial=len(episode_ids) - len(todo), unit="episode",
              desc=f"simulate {method_dir}", disable=not progress) as bar, \
            ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(simulate, specs[e], root / e, model=model, backend=backend,
                               steps=steps) for e in todo]
        for future in as_completed(futures):
            future.result()
            bar.update()
    return root


def generate_baseline(gt_uri: str, out: Path, episodes: Sequence[str] | None, workers: int,
                      progress: bool) -> Path:
    from k4d.episodes import open_dataset

    dataset = open_dataset(gt_uri)
    ids = resolve_episodes(dataset, episodes)
    return generate(dataset, ids, Path(out), BASELINE_DIR, backend=STATIC_WORLD,
                    workers=workers, progress=progress)


def run_and_evaluate(model: str, data_uri: str, out: Path, settings, *,
                     episodes: Sequence[str] | None = None, workers: int = 1,
                     baseline: bool = True, steps: int = 0, backend: str = "",
                     progress: bool = True, learned_metrics=None, record: bool = False,
                     depth: bool = False) -> dict:
    """`k4d eval run`: generate with the model (and the static-world floor), evaluate.
    depth: both also get the first frame's depth (RGB-D input, `k4d simulate --depth`)."""
    from k4d.episodes import open_dataset

    settings.check()
    out = Path(out)
    dataset = open_dataset(data_uri)
    ids = resolve_episodes(dataset, episodes)
    check_clip_sizes(model, dataset, ids)
    pred = generate(dataset, ids, out, PREDICTIONS_DIR, model=model, backend=backend,
                    steps=steps, workers=workers, progress=progress, depth=depth)
    base = generate(dataset, ids, out, BASELINE_DIR, backend=STATIC_WORLD, workers=workers,
                    progress=progress, depth=depth) if baseline else None
    return eval_dataset(str(pred), data_uri, out, settings,
                        baseline_uri=str(base) if base else None, episodes=ids,
                        workers=workers, progress=progress, method=f"{MODEL}: {model}",
                        learned_metrics=learned_metrics, record=record,
                        extra_inputs={"model": model, "generation": "`k4d simulate` subprocess",
                                      "given": "first frame RGB + depth" if depth
                                      else "first frame RGB",
                                      "baseline_method": BASELINE if base else None})
