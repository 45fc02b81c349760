"""`make bench` (benchmarks/run.py) on a machine without a GPU: the GPU benchmarks print
one line and skip, every other benchmark runs, and a failure does not stop the rest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "benchmarks" / "run.py"


def _runner():
    return load_path_module(RUNNER, "k4d_bench_runner")


def test_makefile_bench_uses_the_runner():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert "benchmarks/run.py" in recipe


def test_dry_run_without_a_gpu_skips_only_the_gpu_benchmarks():
    benches = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("benchmarks/*/bench_*.py"))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # torch sees no GPU even on a GPU box
    done = subprocess.run([sys.executable, str(RUNNER), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    planned = dict(line.removeprefix("== ").split(": ", 1) for line in done.stdout.splitlines())
    assert set(benches) <= set(planned)
    for bench, status in planned.items():
        gpu = Path(bench).name.startswith("bench_gpu")
        assert status == ("skipped: no CUDA GPU" if gpu else "would run"), bench
    assert any("bench_gpu" in b for b in benches) and len(benches) >= 4


def test_a_failure_does_not_stop_the_rest(tmp_path, capsys):
    root = tmp_path / "benchmarks"
    marker = tmp_path / "ran.txt"
    scripts = {
        "a/bench_first.py": f"open({str(marker)!r}, 'a').write('first\\n')",
        "b/bench_broken.py": "raise SystemExit(3)",
        "c/bench_gpu.py": "raise SystemExit('must not run without a GPU')",
        "d/bench_last.py": f"open({str(marker)!r}, 'a').write('last\\n')",
    }
    for rel, body in scripts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body + "\n")
    runner = _runner()
    failed = runner.run_all(runner.plan(runner.discover(root), has_gpu=False), root)
    assert failed == ["benchmarks/b/bench_broken.py"]
    assert marker.read_text().splitlines() == ["first", "last"]
    out = capsys.readouterr().out
    assert "== benchmarks/c/bench_gpu.py: skipped: no CUDA GPU" in out
    assert "FAILED (exit 3)" in out
    # With a GPU the GPU benchmark is planned like any other.
    assert all(not p.skip_reason for p in runner.plan(runner.discover(root), has_gpu=True))


def test_bench_gpu_alone_skips_with_one_line_without_a_gpu():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/generator/bench_gpu.py")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "bench_gpu: skipped: no CUDA GPU (smoke run on CPU: --config tiny --device cpu)"]
