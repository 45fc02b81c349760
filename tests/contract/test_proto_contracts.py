"""The protobuf contracts: lint-clean, no breaking change against the committed
baseline, and committed stubs identical to freshly generated ones."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
BASELINE = PROTO / "baseline" / "kinema4d-v1.binpb"


def _buf() -> str:
    exe = shutil.which("buf") or str(Path(sys.executable).with_name("buf"))
    if not Path(exe).exists():
        pytest.fail("buf not found: install the PyPI package buf-bin (make setup does)")
    return exe


def _run_buf(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_buf(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_buf_lint_is_clean():
    result = _run_buf("lint", cwd=PROTO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_breaking_change_against_baseline():
    result = _run_buf("breaking", "--against", str(BASELINE), cwd=PROTO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_breaking_check_catches_a_changed_field_type(tmp_path):
    changed = tmp_path / "proto"
    shutil.copytree(PROTO, changed, ignore=shutil.ignore_patterns("baseline"))
    common = changed / "kinema4d" / "v1" / "common.proto"
    text = common.read_text()
    assert "  string sha256 = 2;" in text
    common.write_text(text.replace("  string sha256 = 2;", "  bytes sha256 = 2;"))
    result = _run_buf("breaking", "--against", str(BASELINE), cwd=changed)
    assert result.returncode != 0
    assert "sha256" in result.stdout + result.stderr


def test_committed_stubs_match_generated(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "tools" / "gen_protos.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh_root = tmp_path / "out"
    gen.generate(fresh_root)
    committed_root = ROOT / "libs" / "runtime" / "src"
    fresh = {p.relative_to(fresh_root): p.read_bytes() for p in (fresh_root / "kinema4d").rglob("*") if p.is_file()}
    committed = {p.relative_to(committed_root): p.read_bytes()
                 for p in (committed_root / "kinema4d").rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    assert sorted(fresh) == sorted(committed), "stub files differ: run `make protos`"
    drifted = [str(k) for k in fresh if fresh[k] != committed[k]]
    assert not drifted, f"stubs drifted from proto/: {drifted}; run `make protos`"


def test_every_service_is_importable_with_health_names():
    from kinema4d.v1 import (
        generator_pb2,
        kinematics_pb2,
        projection_pb2,
        simulator_pb2,
        trainer_pb2,
    )

    names = {m.DESCRIPTOR.services_by_name[s].full_name
             for m, s in [(kinematics_pb2, "KinematicsService"), (projection_pb2, "ProjectionService"),
                          (generator_pb2, "GeneratorService"), (simulator_pb2, "SimulatorService"),
                          (trainer_pb2, "TrainerService")]}
    assert names == {f"kinema4d.v1.{n}" for n in ("KinematicsService", "ProjectionService",
                                                  "GeneratorService", "SimulatorService",
                                                  "TrainerService")}
