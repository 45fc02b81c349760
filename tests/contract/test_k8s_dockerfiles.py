"""Static checks of services/*/Dockerfile (no Docker engine here, so nothing is built).

Parses the instructions and checks what would break an image or its deployment: non-root
user, exec-form CMD serving the directory's own service, the interface ports, COPY sources
that exist and pass the .dockerignore, pinned installs of every local package a service
needs, no torch in the kinematics/projection images, and the generator's GPU variant.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from k4d.config import SERVICE_PORTS
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.parent.name for p in (REPO / "services").glob("*/pyproject.toml"))
TORCH_FREE = ("kinematics", "projection", "simulator")
# Services whose image also runs a Kafka stage worker (`k4d serve <name> --worker`, entry
# point group k4d.workers). The simulator reads its job feed inside the server instead.
STAGE_WORKERS = {"kinematics", "projection", "generator", "trainer"}
APP_USER = "10001:10001"
# Images that run a batch command as a Kubernetes Job (infra/k8s/jobs/<name>), not a server:
# no ports, CMD `k4d <command> ...` instead of `k4d serve <name>`: directory -> command.
JOB_IMAGES = {"datagen": "datagen", "evaluator": "eval"}
SERVERS = [s for s in SERVICES if s not in JOB_IMAGES]


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    assert not current, "dangling line continuation"
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in logical]


def _stages(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the build stages in order."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction, args in _instructions(path.read_text()):
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            stages.append(Stage(name=name, base=words[0]))
        elif not stages:
            assert instruction == "ARG", f"{path}: {instruction} before the first FROM"
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((instruction, args))
    return global_args, stages


def _lineage(stages: list[Stage], stage: Stage) -> list[Stage]:
    """The stage and every stage it builds on, nearest first."""
    by_name = {s.name: s for s in stages}
    chain = [stage]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    return chain


def _effective(stages, stage, instruction) -> list[str]:
    """Values of `instruction` visible in `stage`, including those inherited from its bases."""
    values = []
    for ancestor in reversed(_lineage(stages, stage)):
        values += [args for ins, args in ancestor.instructions if ins == instruction]
    return values


def _dockerfile(service: str) -> Path:
    return REPO / "services" / service / "Dockerfile"


def _pyproject(service_dir: Path) -> dict:
    return tomllib.loads((service_dir / "pyproject.toml").read_text())


def _pip_installs(stages) -> list[list[str]]:
    runs = [args for s in stages for ins, args in s.instructions if ins == "RUN"]
    commands = [part for run in runs for part in re.split(r"&&|;", run) if "pip install" in part]
    return [shlex.split(command) for command in commands]


def _local_targets(words: list[str]) -> list[str]:
    """Local package paths of a pip install command, without extras (`./x[gpu]` -> x)."""
    return [re.sub(r"\$?\{?extras\}?|\[.*\]$", "", w.strip('"')).removeprefix("./").rstrip("/")
            for w in words if w.strip('"').startswith("./")]


def _local_dirs() -> dict[str, Path]:
    """Distribution name -> directory of every package in the repo."""
    dirs = [p.parent for p in sorted((REPO / "libs").glob("*/pyproject.toml"))] + [
        REPO / "services" / s for s in SERVICES]
    return {canonicalize_name(_pyproject(d)["project"]["name"]): d for d in dirs}


def _local_closure(service: str) -> set[Path]:
    """The repo packages `service` needs, itself included."""
    local = _local_dirs()
    todo, seen = [REPO / "services" / service], set()
    while todo:
        directory = todo.pop()
        if directory in seen:
            continue
        seen.add(directory)
        for dep in _pyproject(directory)["project"].get("dependencies", []):
            name = canonicalize_name(Requirement(dep).name)
            if name in local:
                todo.append(local[name])
    return seen


def test_every_service_has_a_dockerfile():
    assert set(SERVERS) == set(SERVICE_PORTS)
    for service in SERVICES:
        assert _dockerfile(service).is_file(), service


@pytest.mark.parametrize("service", SERVICES)
def test_final_and_dev_stages_run_as_the_app_user(service):
    global_args, stages = _stages(_dockerfile(service))
    assert stages[-1].name == "runtime", "the default (last) target must be the runtime stage"
    by_name = {s.name: s for s in stages}
    for target in ("runtime", "dev"):
        users = _effective(stages, by_name[target], "USER")
        assert users and users[-1] == APP_USER, f"{service}:{target} runs as {users[-1:] or 'root'}"
    assert any("useradd --uid 10001" in args for s in stages for ins, args in s.instructions
               if ins == "RUN")


def expected_cmd(service: str) -> list[str]:
    return ["k4d", "serve", service] + (["--worker"] if service in STAGE_WORKERS else [])


@pytest.mark.parametrize("service", SERVERS)
def test_cmd_serves_the_directory_service(service):
    _, stages = _stages(_dockerfile(service))
    for stage in stages:
        if stage.name in ("runtime", "dev"):
            cmd = _effective(stages, stage, "CMD")[-1]
            assert json.loads(cmd) == expected_cmd(service), f"{stage.name}: {cmd}"
    assert not any(ins == "ENTRYPOINT" for s in stages for ins, _ in s.instructions)


@pytest.mark.parametrize("service", SERVERS)
def test_cmd_names_a_registered_server_and_worker(service):
    """`k4d serve <name> [--worker]` loads the k4d.services (and k4d.workers) entry points."""
    entry_points = _pyproject(REPO / "services" / service)["project"].get("entry-points", {})
    groups = ["k4d.services"] + (["k4d.workers"] if service in STAGE_WORKERS else [])
    for group in groups:
        assert service in entry_points.get(group, {}), (
            f"services/{service}/pyproject.toml declares no [project.entry-points.\"{group}\"] "
            f"{service} = ..., so the image's `{' '.join(expected_cmd(service))}` cannot start")


@pytest.mark.parametrize("service", SERVERS)
def test_exposes_the_interface_ports(service):
    _, stages = _stages(_dockerfile(service))
    grpc_port, metrics_port = SERVICE_PORTS[service]
    exposed = {int(p) for args in _effective(stages, stages[-1], "EXPOSE") for p in args.split()}
    assert exposed == {grpc_port, metrics_port}
    env = " ".join(_effective(stages, stages[-1], "ENV"))
    assert f"K4D_GRPC_PORT={grpc_port}" in env and f"K4D_METRICS_PORT={metrics_port}" in env


@pytest.mark.parametrize("service", sorted(JOB_IMAGES))
def test_job_image_cmd_runs_its_own_command(service):
    _, stages = _stages(_dockerfile(service))
    for stage in stages:
        if stage.name in ("runtime", "dev"):
            cmd = json.loads(_effective(stages, stage, "CMD")[-1])[:2]
            assert cmd == ["k4d", JOB_IMAGES[service]], stage.name
    assert not any(ins == "ENTRYPOINT" for s in stages for ins, _ in s.instructions)


@pytest.mark.parametrize("service", SERVICES)
def test_copy_sources_exist_and_pass_the_dockerignore(service):
    path = _dockerfile(service)
    _, stages = _stages(path)
    ignore = [ln.strip() for ln in path.with_name("Dockerfile.dockerignore").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]

    def included(rel: str) -> bool:
        verdict = True
        for pattern in ignore:
            negate = pattern.startswith("!")
            pattern = pattern.removeprefix("!").rstrip("/")
            if pattern == "**" or fnmatch.fnmatch(rel, pattern) or rel.startswith(pattern + "/"):
                verdict = negate
        return verdict

    copies = [args for s in stages for ins, args in s.instructions if ins in ("COPY", "ADD")]
    assert not any(ins == "ADD" for s in stages for ins, _ in s.instructions), "use COPY"
    local = [shlex.split(c) for c in copies if "--from=" not in c]
    assert local
    for words in local:
        words = [w for w in words if not w.startswith("--")]
        for source in words[:-1]:
            rel = source.rstrip("/")
            assert (REPO / rel).exists(), f"{service}: COPY {source} does not exist in the repo"
            assert included(rel), f"{service}: COPY {source} is excluded by Dockerfile.dockerignore"


@pytest.mark.parametrize("service", SERVICES)
def test_installs_every_local_package_it_needs_pinned(service):
    _, stages = _stages(_dockerfile(service))
    installs = _pip_installs(stages)
    assert installs, "no pip install"
    for words in installs:
        assert "-c" in words and words[words.index("-c") + 1] == "constraints.txt", words
    installed = {t for words in installs for t in _local_targets(words)}
    needed = {str(d.relative_to(REPO)) for d in _local_closure(service)}
    assert installed == needed, f"installs {sorted(installed)}, needs {sorted(needed)}"
    copied = {shlex.split(args)[0].rstrip("/") for s in stages for ins, args in s.instructions
              if ins == "COPY" and "--from=" not in args}
    assert needed <= copied


def _third_party_closure(roots: list[str]) -> set[str]:
    """Canonical names of every installed distribution `roots` pull in (no extras)."""
    seen, todo = set(), [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{name} is not installed in the venv; run `make setup`")
        for raw in requires:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


@pytest.mark.parametrize("service", TORCH_FREE)
def test_kinematics_and_projection_images_have_no_torch(service):
    path = _dockerfile(service)
    code = "\n".join(args for _, args in _instructions(path.read_text()))
    assert "torch" not in code.lower(), f"{path} mentions torch outside comments"
    local = _local_closure(service)
    names = [_pyproject(d)["project"]["name"] for d in local]
    closure = _third_party_closure(names)
    assert "torch" not in closure, f"{service} pulls torch in through its dependencies"


def test_torch_closure_check_can_fail():
    assert "torch" in _third_party_closure(["k4d-generator"])


@pytest.mark.parametrize("service", ["generator", "trainer"])
def test_gpu_variant_uses_a_cuda_base(service):
    global_args, stages = _stages(_dockerfile(service))
    assert global_args["VARIANT"] == "cpu"
    assert global_args["CUDA_IMAGE"].startswith("nvidia/cuda:")
    by_name = {s.name: s for s in stages}
    assert by_name["base-gpu"].base == "${CUDA_IMAGE}"
    assert by_name["base-cpu"].base == "${PYTHON_IMAGE}"
    assert by_name["base"].base == "base-${VARIANT}"
    for target in ("build", "app"):
        assert by_name["base"] in _lineage(stages, by_name[target])


def test_generator_gpu_variant_installs_the_gpu_extras():
    _, stages = _stages(_dockerfile("generator"))
    run = " ".join(args for s in stages for ins, args in s.instructions if ins == "RUN")
    assert 'gpu) extras="[gpu]"' in run
    extras = _pyproject(REPO / "services" / "generator")["project"]["optional-dependencies"]["gpu"]
    assert {"onnxruntime-gpu", "tensorrt"} <= {canonicalize_name(Requirement(e).name) for e in extras}


@pytest.mark.parametrize("service", SERVICES)
def test_multi_stage_on_python_slim(service):
    global_args, stages = _stages(_dockerfile(service))
    assert global_args["PYTHON_IMAGE"] == "python:3.11-slim"
    by_name = {s.name: s for s in stages}
    assert {"build", "app", "dev", "runtime"} <= set(by_name)
    # Only the built venv reaches the runtime image, not the sources or pip's build deps.
    copies = [args for ins, args in by_name["app"].instructions if ins == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]
