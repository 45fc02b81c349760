"""Viewing benchmarks (docs/benchmarks/viewer.md): what the 4D outputs cost.

  outputs   the shipped 49-frame 480x720 Panda rollout (static-world): rollout.rrd size and
            write time (k4d.recording, every pixel's point, robot layers, FK link frames and
            meshes, joints, actions), viewer.html size and write time, each next to the rest
            of the rollout's files written in the same run (write_rollout without either).
  simulate  `k4d simulate` wall time (a fresh process each run, as a user runs it) with and
            without the recording (`--no-recording`), runs alternated so load drifts hit
            both; goal: the recording adds at most 10 %.

    python benchmarks/viewer/bench_viewer.py [--part outputs|simulate|all] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "panda_pick"


def machine() -> str:
    """CPU model, cores and the load average now (other jobs share this VM's cores)."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), "unknown CPU")
    return f"{model}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"


def _timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench_outputs(repeats: int) -> dict:
    from k4d.camera_proto import camera_from_proto
    from k4d_embedded.embedded import build_summary
    from k4d_embedded.inputs import SimulationInputs, build_spec
    from k4d_embedded.outputs import robot_link_meshes, write_recording, write_rollout
    from k4d_embedded.pipeline import StageCores, _robot_name, run_embedded
    from k4d_embedded.viewer import write_viewer

    inputs = SimulationInputs(robot="panda", actions=EXAMPLE / "actions.json",
                              image=EXAMPLE / "scene.png", camera=EXAMPLE / "camera.json")
    spec = build_spec(inputs)
    cores = StageCores()
    result = run_embedded(spec, None, cores=cores)
    summary = build_summary(inputs, spec, result, 0.0)
    camera = camera_from_proto(spec.camera)
    meshes = robot_link_meshes(cores.renderer(cores.robot(_robot_name(spec))))
    gen = result.generation
    T, H, W = gen.rgb.shape[:3]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        write_recording(out / "warm.rrd", result, summary, fps=24.0, camera=camera,
                        link_meshes=meshes)  # first use loads rerun's bindings
        rrd_s, rrd = _timed(lambda: write_recording(out / "rollout.rrd", result, summary,
                                                    fps=24.0, camera=camera,
                                                    link_meshes=meshes), repeats)
        html_s, html = _timed(lambda: write_viewer(
            out / "viewer.html", gen.rgb, gen.pointmap, title="bench", focal_px=camera.fy,
            focus=result.projection.mask), repeats)
        rest_s, _ = _timed(lambda: write_rollout(out / "rest", result, summary, record=False),
                           repeats)
        return {"clip": f"{T}x{H}x{W}", "points_per_frame": H * W,
                "rrd_mb": rrd.stat().st_size / 1e6, "rrd_write_s": rrd_s,
                "html_mb": html.stat().st_size / 1e6, "html_write_s": html_s,
                "rollout_files_without_rrd_s": rest_s, "repeats": repeats}


def bench_simulate(repeats: int) -> dict:
    k4d = str(Path(sys.executable).with_name("k4d"))
    args = [k4d, "simulate", "--robot", "panda", "--actions", str(EXAMPLE / "actions.json"),
            "--image", str(EXAMPLE / "scene.png"), "--camera", str(EXAMPLE / "camera.json"),
            "--no-progress"]
    walls: dict[str, list[float]] = {"with": [], "without": []}
    cpus: dict[str, list[float]] = {"with": [], "without": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            order = ("with", "without") if i % 2 == 0 else ("without", "with")
            for kind in order:
                extra = [] if kind == "with" else ["--no-recording"]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run([*args, "--out", f"{tmp}/{kind}{i}", *extra], check=True,
                               capture_output=True)
                walls[kind].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus[kind].append(after.ru_utime + after.ru_stime - before.ru_utime
                                  - before.ru_stime)
    with_s, without_s = statistics.median(walls["with"]), statistics.median(walls["without"])
    # CPU seconds (all threads, user + system) barely depend on what else runs on the VM;
    # wall time under a load average of 10+ mostly measures the other jobs.
    with_cpu, without_cpu = statistics.median(cpus["with"]), statistics.median(cpus["without"])
    return {"simulate_with_recording_s": with_s, "simulate_without_recording_s": without_s,
            "added": with_s / without_s - 1.0, "cpu_with_s": with_cpu,
            "cpu_without_s": without_cpu, "cpu_added": with_cpu / without_cpu - 1.0,
            "runs": walls, "cpu_runs": cpus}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("outputs", "simulate", "all"), default="all")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    results = {}
    if args.part in ("outputs", "all"):
        results["outputs"] = bench_outputs(args.repeats)
        r = results["outputs"]
        print(f"rollout.rrd {r['clip']}: {r['rrd_mb']:.1f} MB in {r['rrd_write_s']:.2f} s; "
              f"viewer.html {r['html_mb']:.1f} MB in {r['html_write_s']:.2f} s; the other "
              f"rollout files {r['rollout_files_without_rrd_s']:.2f} s", flush=True)
    if args.part in ("simulate", "all"):
        results["simulate"] = bench_simulate(args.repeats)
        r = results["simulate"]
        print(f"k4d simulate 49x480x720: {r['simulate_with_recording_s']:.2f} s with rollout.rrd, "
              f"{r['simulate_without_recording_s']:.2f} s without: +{100 * r['added']:.1f} % "
              f"(goal <= 10 %); CPU {r['cpu_with_s']:.1f} s vs {r['cpu_without_s']:.1f} s: "
              f"+{100 * r['cpu_added']:.1f} %", flush=True)
    print(f"machine after: {machine()}")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
