"""Run every benchmark under benchmarks/ (what `make bench` does).

- Discovery: `benchmarks/<area>/bench_*.py`, in path order.
- GPU benchmarks are the files named `bench_gpu*.py`. Without a CUDA GPU each prints one
  line (`== <path>: skipped: no CUDA GPU`) and the rest still run.
- A failing benchmark does not stop the ones after it; the run exits 1 at the end, naming
  every failure.

    .venv/bin/python benchmarks/run.py                 # everything this machine can run
    .venv/bin/python benchmarks/run.py --dry-run       # the plan only: run / skip and why
    .venv/bin/python benchmarks/run.py --only kinematics projection
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
GPU_PATTERN = "bench_gpu*.py"
CUDA_PROBE = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"


@dataclass(frozen=True)
class Planned:
    path: Path
    skip_reason: str = ""


def discover(root: Path) -> list[Path]:
    return sorted(root.glob("*/bench_*.py"))


def needs_gpu(path: Path) -> bool:
    return path.match(GPU_PATTERN)


def cuda_available(python: str = sys.executable) -> bool:
    """Probed in a child process, so this runner never imports torch itself."""
    try:
        return subprocess.run([python, "-c", CUDA_PROBE], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def plan(paths: list[Path], has_gpu: bool) -> list[Planned]:
    return [Planned(p, "no CUDA GPU" if needs_gpu(p) and not has_gpu else "") for p in paths]


def run_all(planned: list[Planned], root: Path, *, python: str = sys.executable,
            dry_run: bool = False) -> list[str]:
    """Run the plan; returns the relative paths of the benchmarks that failed."""
    failed = []
    for item in planned:
        name = item.path.relative_to(root.parent).as_posix()
        if item.skip_reason:
            print(f"== {name}: skipped: {item.skip_reason}", flush=True)
            continue
        if dry_run:
            print(f"== {name}: would run", flush=True)
            continue
        print(f"== {name}", flush=True)
        started = time.monotonic()
        code = subprocess.run([python, str(item.path)]).returncode
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"== {name}: {status} in {time.monotonic() - started:.1f} s", flush=True)
        if code != 0:
            failed.append(name)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    parser.add_argument("--only", nargs="+", metavar="AREA",
                        help="only these areas (directory names under benchmarks/)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    paths = discover(args.root)
    if args.only:
        unknown = sorted(set(args.only) - {p.parent.name for p in paths})
        if unknown:
            parser.error(f"--only: no benchmarks in {unknown}")
        paths = [p for p in paths if p.parent.name in args.only]
    has_gpu = any(needs_gpu(p) for p in paths) and cuda_available()
    failed = run_all(plan(paths, has_gpu), args.root, dry_run=args.dry_run)
    if failed:
        print(f"bench: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
