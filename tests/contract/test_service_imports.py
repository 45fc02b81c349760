"""The import graph: a service package never imports another service's package (DESIGN.md,
"Layout"); only the composers do, and the runtime library imports none.

Read from the sources (every `import`, `from ... import` and `importlib.import_module`
with a literal name, function-local ones included), so a lazy import counts too. The
exceptions that exist today are listed below with the reason; any new edge fails, and an
exception that is no longer used fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNTIME_SRC = REPO / "libs" / "runtime" / "src"
MODEL_SRC = REPO / "libs" / "model" / "src"

# Packages whose job is to compose the stages of other services.
COMPOSERS = {
    "k4d_embedded": "the embedded runner: `k4d simulate` runs every stage in one process",
    "k4d_datagen": "the data engine: kinematics + projection over simulated and imported episodes",
    "k4d_policy": "the policy evaluator: IK for its reference policies, kinematics + projection + the "
                  "generator's model as the world-model world, MuJoCo physics as the other",
}
# Edges that exist today and should not: (importer, imported) -> why, and what removes it.
# None left: the trainer's last edge (to the generator) went with libs/model (ADR 010).
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def service_packages() -> dict[str, Path]:
    """{package name: source directory} of every service package under services/."""
    return {path.name: path for path in sorted(REPO.glob("services/**/src/k4d_*"))
            if path.is_dir() and not path.name.endswith(".egg-info")}


def imported_modules(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(), filename=str(source))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__", "find_spec"):
                found.add(node.args[0].value)
    return found


def import_edges(packages: dict[str, Path], roots: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """{(importer, imported service package): [importing files]} for the `roots` given."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, root in roots.items():
        for source in sorted(root.rglob("*.py")):
            for module in imported_modules(source):
                top = module.split(".")[0]
                if top in packages and top != name:
                    edges.setdefault((name, top), []).append(source.relative_to(REPO).as_posix())
    return edges


def test_the_service_packages_are_found():
    packages = service_packages()
    assert {"k4d_kinematics", "k4d_projection", "k4d_generator", "k4d_simulator"} <= set(packages)


def test_no_service_imports_another_service_except_the_composers():
    packages = service_packages()
    edges = import_edges(packages, packages)
    new = {edge: files for edge, files in edges.items()
           if edge[0] not in COMPOSERS and edge not in KNOWN_EXCEPTIONS}
    assert not new, (
        "service packages import other services' packages (move the shared code into the "
        "runtime library, k4d.*): " + "; ".join(f"{a} -> {b} in {files}" for (a, b), files in new.items()))
    stale = [edge for edge in KNOWN_EXCEPTIONS if edge not in edges]
    assert not stale, f"no longer imported, drop from KNOWN_EXCEPTIONS: {stale}"


def test_composers_are_not_imported_by_services():
    packages = service_packages()
    edges = import_edges(packages, packages)
    inbound = {edge: files for edge, files in edges.items() if edge[1] in COMPOSERS}
    assert not inbound, inbound


def test_the_runtime_imports_no_service_package():
    packages = service_packages()
    edges = import_edges(packages, {"k4d": RUNTIME_SRC / "k4d"})
    assert not edges, f"the runtime library must not import services: {edges}"


def test_the_model_library_imports_no_service_package():
    """libs/model (k4d_model) is shared by the generator and the trainer: it imports the
    runtime and third-party code only."""
    packages = service_packages()
    edges = import_edges(packages, {"k4d_model": MODEL_SRC / "k4d_model"})
    assert not edges, f"the model library must not import services: {edges}"


def test_the_import_scan_sees_lazy_and_importlib_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("import importlib\n\ndef f():\n    from k4d_generator.pipeline import X\n"
                      "    return importlib.import_module('k4d_projection.codecs')\n")
    assert {"k4d_generator.pipeline", "k4d_projection.codecs"} <= imported_modules(source)


def test_test_only_packages_are_not_imported_by_serving_code():
    """`<package>.testing` (and `k4d.testing`) hold test and benchmark support: the shipped
    code of a service or of the runtime never imports them."""
    roots = {**service_packages(), "k4d": RUNTIME_SRC / "k4d"}
    offenders = []
    for root in roots.values():
        for source in sorted(root.rglob("*.py")):
            if "testing" in source.relative_to(root).parts:
                continue
            for module in imported_modules(source):
                parts = module.split(".")
                if len(parts) > 1 and parts[1] == "testing" and (
                        parts[0] in roots or parts[0] == "k4d"):
                    offenders.append(f"{source.relative_to(REPO)} imports {module}")
    assert not offenders, offenders
