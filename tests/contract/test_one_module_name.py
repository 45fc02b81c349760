"""One name per thing (issue 19 points 1 and 3): no module aliases, no re-exports, imports
from the home, no service module named like a library module.

A module that moved lives under its new name only. Two ways of keeping an old name alive are
forbidden in our sources (libs, services, tests, benchmarks, examples, tools, infra):
- aliasing: `sys.modules[name] = other_module` (or `sys.modules.update/setdefault`), which
  makes two import paths one module object;
- a re-export module: a module whose body is only imports (plus a docstring and `__all__`).
  A package's `__init__.py` may gather names of its own submodules; it may not forward
  another package's names.

The one exception is the loader of repository scripts used by tests, which registers a module
it has just executed from a file (what `importlib` itself does), not a second name.

Names too: `from M import N` of a first-party name must name the module that defines N, not
one that only imported it (a re-exported name is a second name for the same thing).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("libs", "services", "tests", "benchmarks", "examples", "tools", "infra", "models")
SKIPPED_DIRS = {"__pycache__", "node_modules", "build", "dist"}
# path -> why it may assign into sys.modules
ALLOWED_SYS_MODULES = {
    "libs/runtime/src/k4d/testing/modules.py":
        "load_path_module registers the module it executes from a script file (importlib's own "
        "protocol, so dataclasses and pickling can find it); it creates no second name",
}


def our_sources() -> list[Path]:
    """Every .py file under the scanned roots, untracked ones included (a shim being added
    fails before it is committed), generated protobuf stubs and virtualenvs excluded."""
    found = []
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(REPO / top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRS
                           and not d.endswith(".egg-info")]
            found += [Path(dirpath) / f for f in filenames
                      if f.endswith(".py") and not f.endswith(("_pb2.py", "_pb2_grpc.py"))]
    return sorted(found)


def _is_sys_modules(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def sys_modules_writes(source: str) -> list[int]:
    """Line numbers of writes into `sys.modules`: item assignment, `update`, `setdefault`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Subscript) and _is_sys_modules(t.value) for t in targets):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("update", "setdefault", "__setitem__")
              and _is_sys_modules(node.func.value)):
            lines.append(node.lineno)
    return sorted(lines)


def _is_docstring_or_all(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return bool(targets) and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def reexport_problem(source: str, package: str | None) -> str | None:
    """Why this module is a re-export shim, or None.

    `package` is the dotted package an `__init__.py` defines (None for any other module): an
    `__init__` may import from its own submodules only; any other module whose body is only
    imports is a second name for someone else's code."""
    body = [node for node in ast.parse(source).body if not _is_docstring_or_all(node)]
    imports = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if not body or len(imports) != len(body):
        return None
    if package is None:
        return "its body is only imports (a re-export module): import the names from their home"
    foreign = []
    for node in imports:
        if isinstance(node, ast.ImportFrom):
            if node.level or node.module == "__future__":
                continue  # relative imports stay inside the package
            modules = [node.module]
        else:
            modules = [alias.name for alias in node.names]
        foreign += [m for m in modules if m != package and not m.startswith(package + ".")]
    if foreign:
        return f"its __init__ only forwards other packages' names ({', '.join(sorted(foreign))})"
    return None


def package_of_init(path: Path) -> str:
    """The dotted package an `__init__.py` defines: its path below the nearest `src/` (our
    installed packages), else below the repository."""
    parts = path.parent.relative_to(REPO).parts
    if "src" in parts:
        parts = parts[len(parts) - parts[::-1].index("src"):]
    return ".".join(parts)


def test_no_module_is_aliased_into_sys_modules():
    offences = []
    for path in our_sources():
        rel = path.relative_to(REPO).as_posix()
        if rel in ALLOWED_SYS_MODULES:
            continue
        offences += [f"{rel}:{line}" for line in sys_modules_writes(path.read_text())]
    assert not offences, f"module aliasing (a second name for a module) is not allowed: {offences}"


def test_no_module_only_re_exports():
    offences = []
    for path in our_sources():
        package = package_of_init(path) if path.name == "__init__.py" else None
        problem = reexport_problem(path.read_text(), package)
        if problem:
            offences.append(f"{path.relative_to(REPO).as_posix()}: {problem}")
    assert not offences, "\n".join(offences)


def test_the_allowed_loader_still_exists():
    """An exception that is no longer needed is removed, so the list only shrinks."""
    for rel in ALLOWED_SYS_MODULES:
        assert sys_modules_writes((REPO / rel).read_text()), rel


def test_the_checks_catch_the_shims_that_were_removed():
    """The shapes that kept old names alive (issue 19) are caught; ordinary code is not."""
    alias = ("import sys\n\nfrom k4d.robots import fk as _moved\n\nsys.modules[__name__] = _moved\n")
    assert sys_modules_writes(alias) == [5]
    several = ("import sys\nimport k4d_model.model as m\nfrom k4d_model.model import configs\n"
               "for n, mod in (('configs', configs),):\n    sys.modules[f'{__name__}.{n}'] = mod\n"
               "sys.modules.update(x=m)\nsys.modules.setdefault('y', m)\n")
    assert sys_modules_writes(several) == [5, 6, 7]
    assert sys_modules_writes("import sys\nloaded = 'rerun' in sys.modules\n"
                              "sys.modules.pop('plugin', None)\n") == []

    reexport = ('"""Moved."""\n\nfrom k4d.camera_proto import camera_from_proto  # noqa: F401\n'
                '__all__ = ["camera_from_proto"]\n')
    assert reexport_problem(reexport, None)
    assert reexport_problem("from k4d.camera import Camera\n", "k4d_projection")
    own = "from k4d.recording.writer import LinkMesh\nfrom .layout import APPLICATION_ID\n"
    assert reexport_problem(own, "k4d.recording") is None
    assert reexport_problem("from k4d.camera import Camera\n\n\ndef f():\n    return Camera\n",
                            None) is None
    assert reexport_problem('"""Only a docstring."""\n', None) is None


def test_a_reintroduced_shim_file_is_found(tmp_path, monkeypatch):
    """The scan over files (not only strings) sees a new, uncommitted shim."""
    package = tmp_path / "services" / "demo" / "src" / "k4d_demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from k4d.camera import Camera\n")
    (package / "fk.py").write_text("import sys\nfrom k4d.robots import fk\nsys.modules[__name__] = fk\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert [p.name for p in our_sources()] == ["__init__.py", "fk.py"]
    assert package_of_init(package / "__init__.py") == "k4d_demo"
    with pytest.raises(AssertionError, match=r"k4d_demo/fk.py:3"):
        test_no_module_is_aliased_into_sys_modules()
    with pytest.raises(AssertionError, match=r"k4d_demo/__init__.py: .*k4d.camera"):
        test_no_module_only_re_exports()


# A service module named like a library module (k4d.*, k4d_model.*) makes a reader ask which
# one is meant. `cli` is every service's role module. The pairs below exist today; the list
# only shrinks (issue 19 point 3 renamed k4d_eval.{video,recording,pipeline}).
ROLE_MODULES = {"cli"}
KNOWN_SHARED_NAMES = {
    "k4d_generator.pipeline": "the model library's pipeline plus the serving loaders (a subclass)",
    "k4d_embedded.pipeline": "the embedded runner's stage composition",
    "k4d_generator.metrics": "the generator's Prometheus metrics beside k4d.metrics' helpers",
    "k4d_simulator.metrics": "the front door's Prometheus metrics beside k4d.metrics' helpers",
    "k4d_generator.service": "the model manager beside k4d.service (service plugins)",
    "k4d_trainer.config": "the training recipe config beside k4d.config (env settings)",
    "k4d_trainer.model": "the trainer's model builder beside k4d_model.model",
}


def library_module_names() -> set[str]:
    names = set()
    for root in sorted(REPO.glob("libs/*/src/k4d*")):  # k4d, k4d_model, k4d_tabletop
        if not root.is_dir() or root.name.endswith(".egg-info"):
            continue
        names |= {p.stem for p in root.iterdir()
                  if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").is_file())}
    return names


def service_modules_named_like_the_libraries() -> set[str]:
    library = library_module_names()
    return {f"{p.parent.name}.{p.stem}" for p in REPO.glob("services/**/src/k4d_*/*.py")
            if p.stem in library and p.stem not in ROLE_MODULES}


def test_no_service_module_is_named_like_a_library_module():
    shared = service_modules_named_like_the_libraries()
    assert shared <= set(KNOWN_SHARED_NAMES), (
        f"rename these (a library module has the name): {sorted(shared - set(KNOWN_SHARED_NAMES))}")
    assert set(KNOWN_SHARED_NAMES) <= shared, (
        f"no longer shared, drop from KNOWN_SHARED_NAMES: {sorted(set(KNOWN_SHARED_NAMES) - shared)}")


def test_the_name_check_sees_a_module_named_like_k4d_video(tmp_path, monkeypatch):
    for rel in ("libs/runtime/src/k4d/video.py", "libs/runtime/src/k4d/recording/__init__.py",
                "libs/model/src/k4d_model/pipeline.py", "services/evaluator/src/k4d_eval/video.py",
                "services/evaluator/src/k4d_eval/recording.py", "services/evaluator/src/k4d_eval/cli.py",
                "services/evaluator/src/k4d_eval/video_metrics.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert service_modules_named_like_the_libraries() == {"k4d_eval.video", "k4d_eval.recording"}


# ---- every first-party name is imported from its home ------------------------------------
def _source_roots(repo: Path) -> list[Path]:
    return sorted([*repo.glob("libs/*/src"), *repo.glob("services/**/src")])


def _module_file(module: str, roots: list[Path]) -> Path | None:
    rel = Path(*module.split("."))
    for root in roots:
        for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _bindings(path: Path) -> tuple[set[str], dict[str, str]]:
    """(names a module defines, {name it imports: from which module}) at module level,
    branches of `if` / `try` included."""
    defined, imported = set(), {}
    nodes = list(ast.parse(path.read_text()).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.If, ast.Try)):
            nodes += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                      *(s for h in getattr(node, "handlers", []) for s in h.body)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                defined |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported |= {a.asname or a.name: node.module for a in node.names}
    return defined, imported


def second_hand_imports(source: str, roots: list[Path]) -> list[str]:
    """`from M import N` (first-party M) where M does not define N but imported it itself:
    N has a home, and that is where it is imported from. A package's `__init__` gathering
    its own submodules' names is their home too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0].startswith("k4d")):
            continue
        path = _module_file(node.module, roots)
        if path is None:
            continue
        defined, imported = _bindings(path)
        for alias in node.names:
            name = alias.name
            if name in defined or name not in imported \
                    or _module_file(f"{node.module}.{name}", roots):
                continue
            home = imported[name]
            if path.name == "__init__.py" and home.startswith(node.module + "."):
                continue
            found.append(f"line {node.lineno}: {name} from {node.module} (its home: {home})")
    return found


def test_first_party_names_are_imported_from_their_home():
    roots = _source_roots(REPO)
    offences = []
    for path in our_sources():
        offences += [f"{path.relative_to(REPO).as_posix()} {o}"
                     for o in second_hand_imports(path.read_text(), roots)]
    assert not offences, "\n".join(offences)


def test_the_home_check_sees_a_second_hand_import(tmp_path):
    lib = tmp_path / "libs" / "runtime" / "src" / "k4d"
    (lib / "robots").mkdir(parents=True)
    (lib / "logs.py").write_text("def get_logger(name):\n    return name\n")
    (lib / "telemetry.py").write_text("from k4d.logs import get_logger\n\nTRACER = None\n")
    (lib / "robots" / "__init__.py").write_text("from k4d.robots.fk import forward_kinematics\n")
    (lib / "robots" / "fk.py").write_text("def forward_kinematics():\n    pass\n")
    roots = _source_roots(tmp_path)
    assert second_hand_imports("from k4d.telemetry import TRACER, get_logger\n", roots) == [
        "line 1: get_logger from k4d.telemetry (its home: k4d.logs)"]
    assert second_hand_imports("def f():\n    from k4d.telemetry import get_logger\n", roots)
    assert second_hand_imports("from k4d.logs import get_logger\nfrom k4d import robots\n"
                               "from k4d.robots import forward_kinematics, fk\n", roots) == []
