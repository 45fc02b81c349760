"""The front door is its own deployable: runtime dependencies only, so its image carries
no torch and no open3d (issue 9 point 12). Checked on what it imports and declares."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

FRONT_DOOR = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "open3d", "k4d_kinematics", "k4d_projection", "k4d_generator",
             "k4d_embedded", "trimesh", "diffusers")


def test_serving_the_front_door_imports_no_stage_package_torch_or_open3d():
    code = (
        "import json, sys\n"
        "import k4d_simulator.server, k4d_simulator.api, k4d_simulator.feed\n"
        "import k4d_simulator.jobs, k4d_simulator.records, k4d_simulator.metrics\n"
        "from k4d_simulator.validation import validate_spec\n"
        "from k4d.grpc_server import create_server\n"
        "from k4d.errors import InvalidArgument\n"
        "from kinema4d.v1 import common_pb2, simulator_pb2\n"
        # Validation runs on every Submit: the camera check included.
        "cam = common_pb2.CameraModel(intrinsics=common_pb2.CameraIntrinsics(\n"
        "    width=8, height=6, fx=5, fy=5, cx=3.5, cy=2.5))\n"
        "cam.t_cam_from_world.values.extend([1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1])\n"
        "try:\n"
        "    validate_spec(simulator_pb2.SimulationSpec(camera=cam))\n"
        "except InvalidArgument as exc:\n"
        "    assert not any(v.field.startswith('spec.camera') for v in exc.violations)\n"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert not loaded & set(FORBIDDEN), sorted(loaded & set(FORBIDDEN))


def test_front_door_declares_runtime_dependencies_only():
    project = tomllib.loads((FRONT_DOOR / "pyproject.toml").read_text())["project"]
    names = {dep.split("[")[0].split("=")[0].split(">")[0].strip()
             for dep in project["dependencies"]}
    assert names <= {"k4d-runtime", "numpy", "grpcio", "prometheus-client"}, names
    assert "k4d.cli" not in project.get("entry-points", {}), "the CLI is the embedded package's"
    sources = {p.stem for p in (FRONT_DOOR / "src" / "k4d_simulator").glob("*.py")}
    assert not sources & {"pipeline", "embedded", "cli", "viewer", "outputs", "localcluster"}
