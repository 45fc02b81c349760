"""Evaluate the Tiltfile with starlark-go and stubbed Tilt builtins (no tilt binary here).

The stubs record every call; the assertions check that each service that can start (its
package registers `k4d serve <name>`) gets an image build and a k8s resource with its ports, and that every path, object and stage the Tiltfile names
exists in the repo, the dev render and the Dockerfiles.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import starlark_go
from k4d.config import SERVICE_PORTS
from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
TILTFILE = REPO / "Tiltfile"
KUSTOMIZE_MARKER = "kustomize:"
# Builtins that return a value hand back a tagged JSON string rather than a dict: passing
# a dict returned by one Python builtin into another crashed starlark-go 1.0.1 (SIGSEGV).
STEP_TAG = "tilt-step:"


class TiltRecorder:
    """Stand-ins for the Tilt builtins the Tiltfile uses; each call is recorded."""

    def __init__(self):
        self.calls: dict[str, list[tuple[tuple, dict]]] = {}

    def _record(self, name):
        def builtin(*args, **kwargs):
            args, kwargs = _decode(list(args)), _decode(kwargs)
            self.calls.setdefault(name, []).append((tuple(args), kwargs))
            if name == "kustomize":
                return KUSTOMIZE_MARKER + args[0]
            if name in ("sync", "fall_back_on", "run", "port_forward"):
                return STEP_TAG + json.dumps({"step": name, "args": args, **kwargs})
            return None
        return builtin

    def globals(self) -> dict:
        # starlark-go does not hold references to the callables it is given: keep them
        # alive on the recorder for as long as the interpreter runs.
        names = ["docker_build", "docker_build_with_restart", "k8s_yaml", "kustomize",
                 "k8s_resource", "local_resource", "sync", "fall_back_on", "run",
                 "port_forward", "allow_k8s_contexts", "update_settings"]
        self.builtins = {name: self._record(name) for name in names}
        return self.builtins


def _decode(value):
    if isinstance(value, str) and value.startswith(STEP_TAG):
        return json.loads(value.removeprefix(STEP_TAG))
    if isinstance(value, list | tuple):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


def _evaluate(source: str) -> TiltRecorder:
    # Tilt's dialect allows top-level for/if and sets; extensions are loaded from the
    # network, so their load() lines are dropped and the builtins they define are stubbed.
    starlark_go.configure_starlark(allow_set=True, allow_global_reassign=True, allow_recursion=True)
    source = re.sub(r"^load\(['\"]ext://.*$", "", source, flags=re.M)
    recorder = TiltRecorder()
    interpreter = starlark_go.Starlark(globals=recorder.globals())
    interpreter.exec(source, filename="Tiltfile")
    return recorder


@pytest.fixture(scope="module")
def tilt() -> TiltRecorder:
    return _evaluate(TILTFILE.read_text())


def _manifests_tool():
    return load_path_module(REPO / "infra/tools/manifests.py", "k4d_infra_manifests")


def _startable_services() -> set[str]:
    """Services whose package registers `k4d serve <name>` (a k4d.services entry point)."""
    startable = set()
    for name in SERVICE_PORTS:
        project = tomllib.loads((REPO / "services" / name / "pyproject.toml").read_text())["project"]
        if name in project.get("entry-points", {}).get("k4d.services", {}):
            startable.add(name)
    return startable


def _images(tilt) -> dict[str, dict]:
    builds = tilt.calls.get("docker_build", []) + tilt.calls.get("docker_build_with_restart", [])
    images = {}
    for args, kwargs in builds:
        ref = args[0]
        assert ref not in images, f"{ref} built twice"
        images[ref] = {"context": args[1] if len(args) > 1 else kwargs.get("context"), **kwargs}
    return images


def _resources(tilt) -> dict[str, dict]:
    resources = {}
    for args, kwargs in tilt.calls.get("k8s_resource", []):
        name = args[0] if args else kwargs.get("workload") or kwargs["new_name"]
        resources[kwargs.get("new_name", name)] = kwargs
    return resources


def test_deploys_the_dev_overlay(tilt):
    (call,) = tilt.calls["k8s_yaml"]
    target = call[0][0]
    assert target == KUSTOMIZE_MARKER + "infra/k8s/overlays/dev"
    assert (REPO / "infra/k8s/overlays/dev/kustomization.yaml").is_file()


BASE_DOCKERFILE = REPO / "infra" / "docker" / "base.Dockerfile"


def _service_images(tilt) -> dict[str, dict]:
    return {ref: b for ref, b in _images(tilt).items() if REPO / b["dockerfile"] != BASE_DOCKERFILE}


def test_base_images_are_built_first_and_fed_to_every_service_build(tilt):
    """One base (issue 19, item 8): Tilt builds infra/docker/base.Dockerfile's targets and
    passes their refs as the BASE_IMAGE / BUILD_IMAGE arguments every service FROMs."""
    images = _images(tilt)
    bases = {ref: b for ref, b in images.items() if REPO / b["dockerfile"] == BASE_DOCKERFILE}
    text = BASE_DOCKERFILE.read_text()
    for ref, build in bases.items():
        assert build["context"] == "." and re.search(rf"^FROM \S+ AS {build['target']}$", text, re.M), ref
        for path in build["only"]:
            assert (REPO / path).exists(), f"{ref}: only={path} does not exist"
        # No source of ours in a base: a code change must live-update, not rebuild all.
        assert not [p for p in build["only"] if p.startswith(("libs/", "services/"))], ref
    for ref, build in _service_images(tilt).items():
        args = build["build_args"]
        assert set(args) == {"BASE_IMAGE", "BUILD_IMAGE"} and set(args.values()) == set(bases), ref
        assert {bases[args["BASE_IMAGE"]]["target"], bases[args["BUILD_IMAGE"]]["target"]} == {"base", "build"}
        dockerfile = (REPO / build["dockerfile"]).read_text()
        for arg in args:
            assert re.search(rf"^ARG {arg}=", dockerfile, re.M) and f"FROM ${{{arg}}} AS" in dockerfile, (ref, arg)


def test_every_service_has_an_image_build(tilt):
    images = _service_images(tilt)
    # Building an image whose CMD cannot start would only show a crash loop in the Tilt UI.
    assert set(images) == {f"k4d/{name}" for name in _startable_services()}
    for ref, build in images.items():
        name = ref.removeprefix("k4d/")
        dockerfile = REPO / build["dockerfile"]
        assert build["context"] == "." and dockerfile == REPO / "services" / name / "Dockerfile"
        text = dockerfile.read_text()
        assert re.search(rf"^FROM \S+ AS {build['target']}$", text, re.M), f"{ref}: no {build['target']} stage"
        # The restart wrapper runs the same command as the image.
        cmds = re.findall(r"^CMD (.+)$", text, re.M)
        assert all(json.loads(cmd) == list(build["entrypoint"]) for cmd in cmds), ref
        for path in build["only"]:
            assert (REPO / path).exists(), f"{ref}: only={path} does not exist"


def test_live_update_syncs_existing_sources_into_the_image_venv(tilt):
    dockerfile_python = re.search(r"python:(\d+\.\d+)-slim", BASE_DOCKERFILE.read_text()).group(1)
    for ref, build in _service_images(tilt).items():
        steps = build["live_update"]
        assert steps[0]["step"] == "fall_back_on", "fall_back_on must come first"
        for path in steps[0]["args"][0]:
            assert (REPO / path).is_file(), f"{ref}: fall_back_on {path} missing"
        syncs = [s for s in steps if s["step"] == "sync"]
        assert syncs
        name = ref.removeprefix("k4d/")
        copied = set(re.findall(r"^COPY (services/\w+)/",
                                (REPO / "services" / name / "Dockerfile").read_text(), re.M))
        for step in syncs:
            source, dest = step["args"]
            assert (REPO / source).is_dir(), f"{ref}: sync source {source} missing"
            package = Path(source).name
            assert dest == f"/opt/venv/lib/python{dockerfile_python}/site-packages/{package}"
            if source.startswith("services/"):
                assert "/".join(source.split("/")[:2]) in copied, f"{ref}: syncs {source} it does not install"
            # Tilt only sends files inside the build context's `only` paths.
            assert any(source.startswith(path) for path in build["only"]), source


def test_every_service_has_a_resource_with_its_ports(tilt):
    resources = _resources(tilt)
    for name in _startable_services():
        grpc_port, metrics_port = SERVICE_PORTS[name]
        assert name in resources, f"no k8s_resource for {name}"
        forwards = {(f["args"][0], f["args"][1]) for f in resources[name]["port_forwards"]}
        assert forwards == {(grpc_port, grpc_port), (metrics_port, metrics_port)}
        for dep in resources[name].get("resource_deps", []):
            assert dep in resources, f"{name} depends on unknown resource {dep}"


def test_grouped_objects_exist_in_the_dev_render(tilt):
    tool = _manifests_tool()
    try:
        docs = tool.render(REPO / "infra/k8s/overlays/dev")
    except tool.KubectlMissing as error:
        pytest.fail(str(error), pytrace=False)
    rendered = {f"{d['metadata']['name']}:{d['kind']}" for d in docs}
    grouped = [obj for res in _resources(tilt).values() for obj in res.get("objects", [])]
    assert len(grouped) == len(set(grouped)), "an object is grouped twice"
    missing = set(grouped) - rendered
    assert not missing, f"Tiltfile groups objects the dev overlay does not render: {sorted(missing)}"
    workloads = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    assert workloads == _startable_services()
    # Every operator-managed object lands in a named resource, not "uncategorized".
    for doc in docs:
        if doc["kind"] in ("Kafka", "KafkaNodePool", "KafkaTopic", "Tenant", "OpenTelemetryCollector"):
            assert f"{doc['metadata']['name']}:{doc['kind']}" in grouped, tool.resource_id(doc)



def test_stub_evaluation_catches_a_broken_tiltfile():
    with pytest.raises(starlark_go.StarlarkError):
        _evaluate("docker_build('k4d/x', '.', dockerfile=missing_variable)")
