"""The import graph: a service package never imports another service's package (DESIGN.md,
"Layout"); only the composers do, and only names of that service's declared public API (its
package root's `__all__`: `from k4d_generator import ModelManager`, never
`k4d_generator.service`). The runtime library (`k4d`, the platform) imports no service and
no other library under libs/ (k4d_model, the domain library k4d_tabletop): ADR 023.

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
TABLETOP_SRC = REPO / "libs" / "tabletop" / "src"

# Packages whose job is to compose the stages of other services.
COMPOSERS = {
    "k4d_embedded": "the embedded runner: `k4d simulate` runs every stage in one process",
    "k4d_datagen": "the data engine: kinematics + projection over simulated and imported episodes",
    "k4d_policy": "the policy evaluator: IK for its reference policies, kinematics + projection + the "
                  "generator's model as the world-model world, MuJoCo physics as the other",
    "k4d_eval": "the evaluator: scores rollouts of the other stages (imports none of them today)",
}
# Edges that exist today and should not: (importer, imported) -> why, and what removes it.
# None left: the trainer's last edge (to the generator) went with libs/model (ADR 010).
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def service_packages() -> dict[str, Path]:
    """{package name: source directory} of every service package under services/."""
    return {path.name: path for path in sorted(REPO.glob("services/**/src/k4d_*"))
            if path.is_dir() and not path.name.endswith(".egg-info")}


def library_packages() -> dict[str, Path]:
    """{package name: source directory} of every library under libs/ besides the runtime
    (k4d_model, k4d_tabletop): the runtime sits below them all."""
    return {path.name: path for path in sorted(REPO.glob("libs/*/src/k4d_*"))
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


def runtime_upward_imports(runtime_root: Path, forbidden: set[str],
                           base: Path = REPO) -> set[tuple[str, str]]:
    """{(file relative to `base`, forbidden package)} for every import of `forbidden` under
    the runtime, function-level and importlib ones included."""
    return {(source.relative_to(base).as_posix(), module.split(".")[0])
            for source in sorted(runtime_root.rglob("*.py"))
            for module in imported_modules(source) if module.split(".")[0] in forbidden}


def test_the_libraries_above_the_runtime_are_found():
    assert {"k4d_model", "k4d_tabletop"} <= set(library_packages())


def test_the_runtime_imports_no_service_package_and_no_other_library():
    """No exception: `k4d up`'s default model is the embedded runner's `k4d.up` hook, the
    scenes, physics and judge are k4d_tabletop, the model options k4d_model.options."""
    forbidden = {*service_packages(), *library_packages()}
    found = sorted(runtime_upward_imports(RUNTIME_SRC / "k4d", forbidden))
    assert not found, ("the runtime library (the platform) must import no service, no "
                       f"k4d_model and no domain library: {found}")


def test_the_runtime_check_sees_a_lazy_model_import(tmp_path):
    (tmp_path / "k4d" / "cli").mkdir(parents=True)
    (tmp_path / "k4d" / "cli" / "up.py").write_text(
        "def publish():\n    from k4d_model import registry\n    return registry\n"
        "import k4d_tabletop.judge\n")
    assert runtime_upward_imports(tmp_path / "k4d", {"k4d_model", "k4d_tabletop", "k4d_generator"},
                                  base=tmp_path) == {("k4d/cli/up.py", "k4d_model"),
                                                     ("k4d/cli/up.py", "k4d_tabletop")}


def public_api(package_root: Path) -> list[str] | None:
    """The names in the package root's `__all__` (None without an __init__.py or `__all__`)."""
    init = package_root / "__init__.py"
    if not init.is_file():
        return None
    for node in ast.parse(init.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            return list(ast.literal_eval(node.value))
    return None


def non_public_imports(source: Path, apis: dict[str, list[str]], own: str) -> list[str]:
    """Imports in `source` of another service package other than `from PKG import NAME` with
    NAME in PKG's public API (`apis`: {package: its __all__})."""
    def foreign(module: str) -> bool:
        return module.split(".")[0] in apis and module.split(".")[0] != own

    found, by_statement = [], set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            by_statement.add(node.module)
            names = [alias.name for alias in node.names]
            if foreign(node.module) and "." in node.module:
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(names)}")
            elif foreign(node.module):
                found += [f"line {node.lineno}: {node.module}.{name} is not in "
                          f"{node.module}.__all__" for name in names if name not in apis[node.module]]
        elif isinstance(node, ast.Import):
            by_statement |= {alias.name for alias in node.names}
            found += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                      if foreign(alias.name)]
    found += [f"importlib: {module}" for module in sorted(imported_modules(source) - by_statement)
              if foreign(module) and "." in module]
    return found


def test_every_service_declares_its_public_api():
    """Each service package root has an `__init__.py` whose `__all__` lists what other
    packages may import, and binds every name it lists."""
    problems = []
    for name, root in service_packages().items():
        api = public_api(root)
        if api is None:
            problems.append(f"{name}: no __all__ in {root.relative_to(REPO)}/__init__.py")
            continue
        tree = ast.parse((root / "__init__.py").read_text())
        bound = {alias.asname or alias.name for node in tree.body
                 if isinstance(node, ast.ImportFrom) for alias in node.names}
        bound |= {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                  for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                  if isinstance(target, ast.Name)}
        problems += [f"{name}.__all__ names {n}, which its __init__ does not bind"
                     for n in api if n not in bound]
    assert not problems, problems


def test_composers_import_only_the_public_api_of_other_services():
    packages = service_packages()
    apis = {name: public_api(root) or [] for name, root in packages.items()}
    offences = [f"{source.relative_to(REPO)} {problem}"
                for name in COMPOSERS for source in sorted(packages[name].rglob("*.py"))
                for problem in non_public_imports(source, apis, name)]
    assert not offences, ("composers import other services only through their public API "
                          "(`from k4d_x import NAME`, NAME in k4d_x.__all__; add it there if it "
                          "is meant to be public):\n" + "\n".join(offences))


def test_the_public_api_check_sees_internal_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from k4d_generator.service import ModelManager\n"
                      "from k4d_generator import ModelManager, secret\nimport k4d_projection.core\n"
                      "import importlib\nimportlib.import_module('k4d_kinematics.ik')\n"
                      "from k4d_policy.worlds import WorldModel\n")
    apis = {"k4d_generator": ["ModelManager"], "k4d_projection": [], "k4d_kinematics": [],
            "k4d_policy": []}
    assert non_public_imports(source, apis, "k4d_policy") == [
        "line 1: from k4d_generator.service import ModelManager",
        "line 2: k4d_generator.secret is not in k4d_generator.__all__",
        "line 3: import k4d_projection.core",
        "importlib: k4d_kinematics.ik",
    ]


def test_the_model_library_imports_no_service_package():
    """libs/model (k4d_model) is shared by the generator and the trainer: it imports the
    runtime and third-party code only."""
    packages = service_packages()
    edges = import_edges({**packages, "k4d_tabletop": TABLETOP_SRC / "k4d_tabletop"},
                         {"k4d_model": MODEL_SRC / "k4d_model"})
    assert not edges, f"the model library must not import services or the domain library: {edges}"


def test_the_tabletop_library_imports_no_service_package_and_no_model():
    """libs/tabletop (k4d_tabletop: scenes, physics, judge) is shared by datagen, policy,
    the evaluator and the trainer: it imports the runtime and third-party code only (a
    success judge that read the model would be judged by what it judges)."""
    packages = service_packages()
    edges = import_edges({**packages, "k4d_model": MODEL_SRC / "k4d_model"},
                         {"k4d_tabletop": TABLETOP_SRC / "k4d_tabletop"})
    assert not edges, f"the tabletop library must not import services or k4d_model: {edges}"


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
