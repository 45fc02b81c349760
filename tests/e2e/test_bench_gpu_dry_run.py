"""`make bench-gpu` (benchmarks/gpu/run.sh) checked here, on the CPU: `--dry-run` runs every
section with the tiny shapes and writes the results file the GPU run writes (same sections,
same keys; GPU-only figures null); without a GPU and without --dry-run it refuses with one
line and exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "gpu" / "run.sh"
SECTIONS = ["environment", "dit_step_14b_bf16", "onnxruntime_cuda", "tensorrt_fp16",
            "lora_14b_memory", "k4d_train_demo",
            # the sampling levers (issue 44)
            "solver_unipc", "cache_dbcache", "quant_fp8", "compile", "profile_fast"]


def _env() -> dict:
    # No GPU even on a GPU box; one thread, as the other subprocess tests run.
    return {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1"}


def test_makefile_bench_gpu_runs_the_script():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nbench-gpu:", 1)[1].split("\n\n", 1)[0]
    assert "benchmarks/gpu/run.sh" in recipe
    assert "wheels/" in (REPO / "benchmarks" / "gpu" / ".gitignore").read_text()


@pytest.mark.slow  # ~3 min on a busy 2-core machine: builds, exports, trains and compiles the tiny model
def test_dry_run_writes_every_section(tmp_path):
    out = tmp_path / "bench-gpu.json"
    done = subprocess.run(["bash", str(RUN), "--dry-run", "--out", str(out)], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["schema"] == 1 and results["dry_run"] is True
    sections = results["sections"]
    assert list(sections) == SECTIONS
    assert {name: s["status"] for name, s in sections.items()} == {
        **dict.fromkeys(SECTIONS, "ok"), "tensorrt_fp16": "skipped",
        "quant_fp8": "skipped"}, sections
    assert sections["tensorrt_fp16"]["reason"] == "needs a CUDA GPU"
    assert "Hopper" in sections["quant_fp8"]["reason"]  # refused on CPU, never run in bf16
    for name in ("solver_unipc", "cache_dbcache", "compile", "profile_fast"):
        lever = sections[name]
        assert lever["finite"] and lever["steps"] == 4 and lever["attention_backend"]
        assert lever["projected_denoise_s"] >= 0
    assert sections["solver_unipc"]["options"]["solver"] == "unipc"
    assert sections["cache_dbcache"]["options"]["cache"] == "dbcache"
    assert sections["compile"]["compile_s"] > 0  # the one-time cost, apart
    assert sections["profile_fast"]["options"]["profile"] == "fast"
    dit = sections["dit_step_14b_bf16"]
    assert dit["config"] == "tiny" and dit["step_s_median"] > 0 and dit["peak_mem_gib"] is None
    assert dit["tokens"] == dit["latent"][0] * (dit["latent"][1] // 2) * dit["latent"][2]
    assert sections["onnxruntime_cuda"]["backend"]["providers"] == ["CPUExecutionProvider"]
    lora = sections["lora_14b_memory"]
    assert [d["layers"] for d in lora["reduced_depths"]] == [1, 2]
    assert lora["extrapolated_peak_gib"] is None  # a GPU figure
    train = sections["k4d_train_demo"]
    assert train["summary"] == "succeeded" and train["steps"] == 3
    assert train["recipe"] == "examples/train/demo-model.yaml"
    printed = [line for line in done.stdout.splitlines() if line.startswith("bench-gpu: ")]
    assert len(printed) == len(SECTIONS) + 1


def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu" / "suite.py"),
                           "--out", str(tmp_path / "x.json")], env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bench-gpu: error: no CUDA GPU (use --dry-run for the CPU check)"]
    assert not (tmp_path / "x.json").exists()
