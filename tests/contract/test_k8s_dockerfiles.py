"""Static checks of services/*/Dockerfile and their shared base, infra/docker/base.Dockerfile
(no Docker engine here, so nothing is built).

Parses the instructions, following each service's FROM into the base file, and checks what
would break an image or its deployment: one shared base (no service repeats the OS, user,
environment or venv set-up), non-root user, exec-form CMD serving the directory's own
service, the interface ports, COPY sources that exist and pass the .dockerignore, pinned
installs of every local package a service needs, no torch in the kinematics/projection
images nor in the trainer's control plane, and the GPU variants.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from k4d.config import SERVICE_PORTS
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
BASE_DOCKERFILE = REPO / "infra" / "docker" / "base.Dockerfile"
# The service Dockerfiles' FROM images -> the base file's target that builds them.
BASE_TARGETS = {"k4d/base": "build-base/base", "k4d/base-build": "build-base/build"}
SERVICES = sorted(p.parent.name for p in (REPO / "services").glob("*/pyproject.toml"))
TORCH_FREE = ("kinematics", "projection", "simulator")
# Services whose image also runs a Kafka stage worker (`k4d serve <name> --worker`, entry
# point group k4d.workers). The simulator reads its job feed inside the server instead.
STAGE_WORKERS = {"kinematics", "projection", "generator", "trainer"}
APP_USER = "10001:10001"
# Images that run a batch command as a Kubernetes Job (infra/k8s/jobs/<name>), not a server:
# no ports, CMD `k4d <command> ...` instead of `k4d serve <name>`: directory -> command.
JOB_IMAGES = {"datagen": "datagen", "evaluator": "eval", "policy": "policy-eval"}
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


def _expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), value)


def _image_stages(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """A service Dockerfile's stages preceded by those of the base file its FROMs name
    (renamed build-base/<stage>), so lineages run through the shared base. Returns the
    global ARGs of both, the service's taking precedence, expanded."""
    global_args, stages = _stages(path)
    base_args, base_stages = _stages(BASE_DOCKERFILE)
    args = {**base_args, **global_args}
    args = {k: _expand(v, args) for k, v in args.items()}
    names = {st.name for st in base_stages}
    combined = []
    for st in base_stages:
        parent = _expand(st.base, args)
        combined.append(Stage(f"build-base/{st.name}",
                              f"build-base/{parent}" if parent in names else st.base, st.instructions))
    for st in stages:
        image = _expand(st.base, args).split(":")[0]
        combined.append(Stage(st.name, BASE_TARGETS.get(image, st.base), st.instructions))
    return args, combined


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
    return [re.sub(r"\$?\{?extras\}?|\[.*\]$", "", w.strip('"\'')).removeprefix("./").rstrip("/")
            for w in words if w.strip('"\'').startswith("./")]


def _local_extras(words: list[str]) -> dict[str, set[str]]:
    """Local package path -> the extras a pip install command asks for (`./x[a,b]`)."""
    found = {}
    for word in words:
        match = re.fullmatch(r"\./([\w/.-]+?)/?\[([\w,]+)\]", word.strip('"\''))
        if match:
            found.setdefault(match.group(1), set()).update(match.group(2).split(","))
    return found


def _local_dirs() -> dict[str, Path]:
    """Distribution name -> directory of every package in the repo."""
    dirs = [p.parent for p in sorted((REPO / "libs").glob("*/pyproject.toml"))] + [
        REPO / "services" / s for s in SERVICES]
    return {canonicalize_name(_pyproject(d)["project"]["name"]): d for d in dirs}


def _requirements(directory: Path, extras: set[str] = frozenset()) -> list[str]:
    project = _pyproject(directory)["project"]
    optional = project.get("optional-dependencies", {})
    return project.get("dependencies", []) + [r for e in sorted(extras) for r in optional.get(e, [])]


def _local_closure(service: str, extras: dict[str, set[str]] | None = None) -> set[Path]:
    """The repo packages `service` needs, itself included, with `extras` (package path ->
    extras) followed where an install asks for them."""
    local, extras = _local_dirs(), extras or {}
    todo, seen = [REPO / "services" / service], set()
    while todo:
        directory = todo.pop()
        if directory in seen:
            continue
        seen.add(directory)
        for dep in _requirements(directory, extras.get(str(directory.relative_to(REPO)), set())):
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
    global_args, stages = _image_stages(_dockerfile(service))
    assert stages[-1].name == "runtime", "the default (last) target must be the runtime stage"
    by_name = {s.name: s for s in stages}
    for target in ("runtime", "dev"):
        users = _effective(stages, by_name[target], "USER")
        assert users and users[-1] == APP_USER, f"{service}:{target} runs as {users[-1:] or 'root'}"
    assert any("useradd --uid 10001" in args for args in _effective(stages, by_name["runtime"], "RUN"))


def expected_cmd(service: str) -> list[str]:
    return ["k4d", "serve", service] + (["--worker"] if service in STAGE_WORKERS else [])


@pytest.mark.parametrize("service", SERVERS)
def test_cmd_serves_the_directory_service(service):
    _, stages = _image_stages(_dockerfile(service))
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
    _, stages = _image_stages(_dockerfile(service))
    grpc_port, metrics_port = SERVICE_PORTS[service]
    exposed = {int(p) for args in _effective(stages, stages[-1], "EXPOSE") for p in args.split()}
    assert exposed == {grpc_port, metrics_port}
    env = " ".join(_effective(stages, stages[-1], "ENV"))
    assert f"K4D_GRPC_PORT={grpc_port}" in env and f"K4D_METRICS_PORT={metrics_port}" in env


@pytest.mark.parametrize("service", sorted(JOB_IMAGES))
def test_job_image_cmd_runs_its_own_command(service):
    _, stages = _image_stages(_dockerfile(service))
    for stage in stages:
        if stage.name in ("runtime", "dev"):
            cmd = json.loads(_effective(stages, stage, "CMD")[-1])[:2]
            assert cmd == ["k4d", JOB_IMAGES[service]], stage.name
    assert not any(ins == "ENTRYPOINT" for s in stages for ins, _ in s.instructions)


DOCKERFILES = [f"services/{s}/Dockerfile" for s in SERVICES] + ["infra/docker/base.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_copy_sources_exist_and_pass_the_dockerignore(dockerfile):
    path = REPO / dockerfile
    _, stages = _stages(path)
    ignore = [ln.strip() for ln in path.with_name(path.name + ".dockerignore").read_text().splitlines()
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
            assert (REPO / rel).exists(), f"{dockerfile}: COPY {source} does not exist in the repo"
            assert included(rel), f"{dockerfile}: COPY {source} is excluded by its .dockerignore"


def test_every_service_builds_from_the_one_base():
    """The OS, user, environment and venv set-up live once, in infra/docker/base.Dockerfile;
    a service Dockerfile only adds its packages, ports and command (issue 19, item 8)."""
    shared = ("useradd", "python3 -m venv", "PYTHONUNBUFFERED", "PIP_NO_CACHE_DIR", "sysconfig",
              "apt-get install -y --no-install-recommends python3", "COPY constraints.txt", "COPY proto/")
    # (A service without a Dockerfile fails test_every_service_has_a_dockerfile.)
    for service in [s for s in SERVICES if _dockerfile(s).is_file()]:
        text = "\n".join(f"{ins} {args}" for ins, args in _instructions(_dockerfile(service).read_text()))
        assert not [w for w in shared if w in text], f"{service} repeats {[w for w in shared if w in text]}"
        args, stages = _image_stages(_dockerfile(service))
        own = [st for st in stages if not st.name.startswith("build-base/")]
        names = {st.name for st in stages}
        for stage in own:
            assert stage.base in names, f"{service}:{stage.name} builds FROM {stage.base}, not the base"
        by_name = {st.name: st for st in stages}
        assert "build-base/build" in [st.name for st in _lineage(stages, by_name["build"])], service
        assert "build-base/base" in [st.name for st in _lineage(stages, by_name["app"])], service


@pytest.mark.parametrize("service", SERVICES)
def test_installs_every_local_package_it_needs_pinned(service):
    _, stages = _image_stages(_dockerfile(service))
    installs = _pip_installs(stages)
    assert installs, "no pip install"
    for words in installs:
        assert "-c" in words and words[words.index("-c") + 1] == "constraints.txt", words
    installed = {t for words in installs for t in _local_targets(words)}
    extras = {}
    for words in installs:
        for package, names in _local_extras(words).items():
            extras.setdefault(package, set()).update(names)
    needed = {str(d.relative_to(REPO)) for d in _local_closure(service, extras)}
    assert installed == needed, f"installs {sorted(installed)}, needs {sorted(needed)}"
    copied = {shlex.split(args)[0].rstrip("/") for s in stages for ins, args in s.instructions
              if ins == "COPY" and "--from=" not in args}
    assert needed <= copied


def _third_party_closure(roots: list[str]) -> set[str]:
    """Canonical names of every distribution `roots` pull in (no extras): the repo's own
    packages from their pyproject.toml (an editable install's metadata may be older), the
    rest from the venv."""
    local = _local_dirs()
    seen, todo = set(), [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in local:
            todo += [canonicalize_name(Requirement(r).name) for r in _requirements(local[name])]
            continue
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
    code = "\n".join(args for file in (path, BASE_DOCKERFILE) for _, args in _instructions(file.read_text()))
    assert "torch" not in code.lower(), f"{path} (or the base) mentions torch outside comments"
    local = _local_closure(service)
    names = [_pyproject(d)["project"]["name"] for d in local]
    closure = _third_party_closure(names)
    assert "torch" not in closure, f"{service} pulls torch in through its dependencies"


def test_torch_closure_check_can_fail():
    assert "torch" in _third_party_closure(["k4d-generator"])


@pytest.mark.parametrize("service", ["generator", "trainer", "evaluator"])
def test_gpu_variant_uses_a_cuda_base(service):
    own_args, _ = _stages(_dockerfile(service))
    assert own_args["VARIANT"] == "cpu"
    # --build-arg VARIANT=gpu picks the :gpu base images.
    assert own_args["BASE_IMAGE"] == "k4d/base:${VARIANT}"
    assert own_args["BUILD_IMAGE"] == "k4d/base-build:${VARIANT}"
    global_args, stages = _image_stages(_dockerfile(service))
    assert global_args["CUDA_IMAGE"].startswith("nvidia/cuda:")
    by_name = {s.name: s for s in stages}
    assert by_name["build-base/os-gpu"].base == "${CUDA_IMAGE}"
    assert by_name["build-base/os-cpu"].base == "${PYTHON_IMAGE}"
    base_args, base_stages = _stages(BASE_DOCKERFILE)
    assert {s.name: s.base for s in base_stages}["base"] == "os-${VARIANT}"
    for target in ("build", "app"):
        assert by_name["build-base/base"] in _lineage(stages, by_name[target])


def test_generator_gpu_variant_installs_the_gpu_extras():
    _, stages = _image_stages(_dockerfile("generator"))
    run = " ".join(args for s in stages for ins, args in s.instructions if ins == "RUN")
    assert 'gpu) extras="[gpu]"' in run
    extras = _pyproject(REPO / "services" / "generator")["project"]["optional-dependencies"]["gpu"]
    assert {"onnxruntime-gpu", "tensorrt"} <= {canonicalize_name(Requirement(e).name) for e in extras}


@pytest.mark.parametrize("service", SERVICES)
def test_multi_stage_on_python_slim(service):
    global_args, stages = _image_stages(_dockerfile(service))
    assert global_args["PYTHON_IMAGE"] == "python:3.11-slim" and global_args["VARIANT"] == "cpu"
    by_name = {s.name: s for s in stages}
    assert {"build", "app", "dev", "runtime"} <= set(by_name)
    assert by_name["build-base/os-cpu"] in _lineage(stages, by_name["app"])
    # Only the built venv reaches the runtime image, not the sources or pip's build deps.
    copies = [args for ins, args in by_name["app"].instructions if ins == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]


TRAIN_ONLY = ("torch", "peft", "diffusers", "transformers", "accelerate",
              "safetensors", "yaml", "tqdm", "tensorboard", "matplotlib")
# Of the model library, the control plane loads the output-option schema alone (recipe
# validation; torch-free, the library's base install): never the model (ADR 023).
CONTROL_MODEL_MODULES = ("k4d_model", "k4d_model.options")


def test_trainer_control_plane_target_has_no_torch():
    """The trainer's control plane (TrainerService + the k4d.train.requested worker) is its
    own image, k4d/trainer-control: it creates PyTorchJobs and never trains (issue 19)."""
    _, stages = _image_stages(_dockerfile("trainer"))
    by_name = {s.name: s for s in stages}
    control = by_name["control"]
    assert json.loads(_effective(stages, control, "CMD")[-1]) == expected_cmd("trainer")
    assert _effective(stages, control, "USER")[-1] == APP_USER
    exposed = {int(p) for args in _effective(stages, control, "EXPOSE") for p in args.split()}
    assert exposed == set(SERVICE_PORTS["trainer"])
    venvs = [args for st in _lineage(stages, control) for ins, args in st.instructions
             if ins == "COPY" and "--from=" in args]
    assert venvs == ["--from=build-control /opt/venv /opt/venv"]
    (install,) = _pip_installs([by_name["build-control"]])
    targets = _local_targets(install)
    assert "torch" not in " ".join(install) and _local_extras(install) == {}
    names = [_pyproject(REPO / t)["project"]["name"] for t in targets]
    closure = _third_party_closure(names)  # k4d-model without extras: its torch-free base
    assert not closure & {canonicalize_name(m) for m in ("torch", "diffusers", "peft")}, closure
    # ... and the full image still gets training: the `train` extra brings torch.
    (full,) = _pip_installs([by_name["build"]])
    assert _local_extras(full).get("services/trainer") == {"train"}
    train = _requirements(REPO / "services" / "trainer", {"train"})
    assert "torch" in {canonicalize_name(Requirement(r).name) for r in train}


def test_trainer_control_plane_runs_without_the_training_stack():
    """What `k4d serve trainer --worker` loads, with every `train`-extra module made
    unimportable: the CLI, server, worker, run records, and a PyTorchJob rendered from a
    validated request (what the kubernetes launcher does)."""
    code = f"""
import importlib.abc, json, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TRAIN_ONLY!r} or (
                name.startswith("k4d_model") and name not in {CONTROL_MODEL_MODULES!r}):
            raise ImportError(name + " is not in the control-plane image")
sys.meta_path.insert(0, Block())
import k4d_trainer.cli, k4d_trainer.control.server, k4d_trainer.control.worker, k4d_trainer.runs
from k4d.config import load_config
from k4d_trainer.control import pytorchjob
from k4d_trainer.control.launcher import run_env
from k4d_trainer.control.spec import validate_spec
from kinema4d.v1 import common_pb2, trainer_pb2
plan = validate_spec(trainer_pb2.TrainingJobSpec(
    base_model=common_pb2.ModelRef(name="wan2.1-i2v-14b"), dataset_uri="s3://k4d/datasets/x",
    output_model_name="kinema4d-panda", variant="pmcond", num_steps=100, world_size=2))
env = run_env(load_config(env={{"K4D_STORE_URI": "s3://k4d", "K4D_S3_ENDPOINT": "minio:80"}}))
objects = pytorchjob.render_run("train-18a2b3c4d5e-0123456789ab", plan, "s3://k4d/trainer/runs/x",
                                namespace="k4d", image="k4d/trainer:gpu", nproc_per_node="gpu", env=env)
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}})))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert not loaded & set(TRAIN_ONLY)
