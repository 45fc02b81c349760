"""CPU drift of each sampling lever and of the `fast` profile against `reference` (issue 44).

The shipped small model (default: the manifest `k4d simulate` uses) samples held-out
episodes (`k4d datagen synthetic --framing workspace --seed 6271`, never trained on) at the
same seed under each variant; the evaluator scores every variant against the episodes'
ground truth, and each region's figure is reported relative to `reference`'s:
- static PSNR (dB, higher is better), changed MSE and objects MSE (lower is better), over
  the generated frames (k4d_eval.report.goal_figures);
- `drift`: the largest relative difference of the three from reference's (the test
  `tests/e2e/test_generator_drift.py` holds fast's <= 10 %);
- the wall time of each variant's generations and its cached steps.

FP8 and compiled blocks are not here: FP8 runs on Hopper GPUs only (bench-gpu's
`quant_fp8`), and compiling does not change the numbers beyond rounding (bench-gpu's
`compile`).

    .venv/bin/python benchmarks/generator/drift.py [--episodes 4] [--variants reference fast]
        [--model DIR] [--out drift.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEED = 6271  # the held-out split's dataset seed (docs/benchmarks.md)
SAMPLE_SEED = 42
REGION_FIGURES = {"static_psnr": "higher", "changed_mse": "lower", "objects_mse": "lower"}
VARIANTS: dict[str, dict] = {
    "reference": {"profile": "reference"},
    "solver_unipc": {"profile": "reference", "solver": "unipc", "steps": 20},
    "cache_dbcache": {"profile": "reference", "cache": "dbcache"},
    "cache_dbcache_taylorseer": {"profile": "reference", "cache": "dbcache-taylorseer"},
    "fast": {"profile": "fast"},
}


def make_episodes(root: Path, episodes: int, frames: int, height: int, width: int) -> str:
    uri = str(root / "heldout")
    subprocess.run([sys.executable, "-m", "k4d.cli.main", "datagen", "synthetic", "--framing",
                    "workspace", "--seed", str(SEED), "--episodes", str(episodes), "--frames",
                    str(frames), "--height", str(height), "--width", str(width), "--out", uri,
                    "--no-progress"], check=True, capture_output=True)
    return uri


def sample_variant(model: str, dataset, ids: list[str], layer: dict, out: Path, cores
                   ) -> dict:
    """`k4d simulate` (in process, one loaded model for every run) of each episode."""
    from k4d_embedded.embedded import simulate_to_directory
    from k4d_embedded.inputs import SimulationInputs
    from k4d_eval.generate import write_episode_inputs

    seconds, cached = 0.0, []
    for episode in ids:
        spec = write_episode_inputs(dataset, episode, out / "inputs" / episode)
        inputs = SimulationInputs(robot=spec["--robot"], actions=Path(spec["--actions"]),
                                  image=Path(spec["--image"]), camera=Path(spec["--camera"]),
                                  model=model, seed=SAMPLE_SEED, frames=int(spec["--frames"]),
                                  sampling=dict(layer))
        started = time.perf_counter()
        simulate_to_directory(inputs, out / "predictions" / episode, show_progress=False,
                              record=False, cores=cores, fps=float(spec["--fps"]))
        seconds += time.perf_counter() - started
        summary = json.loads((out / "predictions" / episode / "summary.json").read_text())
        cached.append(int(summary["sampling"].get("cached_steps", 0)))
        steps = summary["sampling"]["num_steps"]
    return {"seconds": round(seconds, 2), "cached_steps": cached, "num_steps": steps}


def score(out: Path, gt_uri: str, ids: list[str]) -> dict:
    from k4d_eval.eval_runs import eval_dataset
    from k4d_eval.evaluate import Settings
    from k4d_eval.report import goal_figures

    report = eval_dataset(str(out / "predictions"), gt_uri, out / "eval", Settings(threads=2),
                          episodes=ids, progress=False)
    figures = goal_figures(report)
    return {key: figures[key] for key in REGION_FIGURES}


def relative(figures: dict, reference: dict) -> dict:
    """Each region figure as a relative difference from reference's (signed: + is better
    for PSNR and worse for MSE, as the raw numbers move), and the largest magnitude."""
    rel = {}
    for key in REGION_FIGURES:
        ref, value = reference.get(key), figures.get(key)
        rel[key] = (None if ref in (None, 0) or value is None
                    else round((value - ref) / abs(ref), 4))
    known = [abs(v) for v in rel.values() if v is not None]
    return {**rel, "drift": max(known) if known else None}


def run(model: str, episodes: int, variants: list[str], work: Path) -> dict:
    from k4d.episodes import open_dataset
    from k4d_embedded.pipeline import StageCores
    from k4d_eval.generate import model_clip_size

    # a shipped model keeps its files under weights/ beside its manifest
    clip = model_clip_size(model) or model_clip_size(str(Path(model) / "weights"))
    gt_uri = make_episodes(work, episodes, *clip)
    dataset = open_dataset(gt_uri)
    ids = sorted(dataset.episode_ids)[:episodes]
    cores = StageCores()
    rows = {}
    for name in ["reference", *[v for v in variants if v != "reference"]]:
        out = work / name
        timing = sample_variant(model, dataset, ids, VARIANTS[name], out, cores)
        rows[name] = {"options": VARIANTS[name], **timing, **score(out, gt_uri, ids)}
    for row in rows.values():
        row["relative_to_reference"] = relative(row, rows["reference"])
    return {"model": model, "episodes": ids, "dataset_seed": SEED, "sample_seed": SAMPLE_SEED,
            "clip": list(clip), "variants": rows}


def default_model() -> str:
    from k4d_embedded.shipped import default_model as shipped

    return shipped()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model (default: the shipped one)")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="k4d-drift-") as work:
        result = run(args.model or default_model(), args.episodes, args.variants, Path(work))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
