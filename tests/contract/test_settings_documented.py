"""One typed settings object (issue 46 point 6, ADR 022): docs/configuration.md lists exactly
the variables of `k4d.settings` (name, field, type), and no code reads a K4D_* variable from
the environment anywhere but the settings modules. Setting one for a child process (a dict
literal, `env[VAR] = ...`, `setdefault`) is a write and allowed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from k4d import settings
from k4d.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
SETTINGS_MODULES = {ROOT / "libs/runtime/src/k4d/config.py",
                    ROOT / "libs/runtime/src/k4d/settings.py"}
SCANNED = ("libs", "services", "tools", "benchmarks", "examples", "infra", "tests")
SETTINGS_HEADER = "| variable | field | type | default | meaning |"
SCRIPTS_HEADER = "| variable | read by | meaning |"


def _table_rows(header: str) -> list[list[str]]:
    """The cells of every row of every table in the doc that has `header`."""
    rows, inside = [], False
    for line in DOC.read_text().splitlines():
        if line.strip() == header:
            inside = True
            continue
        if inside and line.startswith("|"):
            if not set(line) <= set("|-: "):
                rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
            continue
        inside = False
    return rows


def _documented() -> dict[str, tuple[str, str]]:
    """variable -> (field, type) of the settings tables."""
    out: dict[str, tuple[str, str]] = {}
    for cells in _table_rows(SETTINGS_HEADER):
        name = cells[0].strip("`")
        assert name not in out, f"{name} is documented twice"
        out[name] = (cells[1].strip("`"), cells[2])
    return out


def test_the_documented_variables_are_the_settings_variables():
    code = {v.name: (v.field, v.type) for v in settings.variables().values()}
    documented = _documented()
    assert sorted(set(code) - set(documented)) == [], "document these in docs/configuration.md"
    assert sorted(set(documented) - set(code)) == [], "documented but not in k4d.settings"
    wrong = {name: (documented[name], code[name]) for name in code
             if documented[name] != code[name]}
    assert not wrong, f"(documented field, type) vs the code's: {wrong}"


def test_every_setting_has_a_description():
    assert [v.name for v in settings.variables().values() if not v.doc.strip()] == []


def test_variables_read_by_scripts_are_documented_and_outside_the_settings():
    scripts = {cells[0].strip("`") for cells in _table_rows(SCRIPTS_HEADER)}
    assert not scripts & set(settings.variables()), "a variable is in both lists"
    read = set()
    for path in [*ROOT.glob("examples/**/*.sh"), *ROOT.glob("infra/**/*.sh"),
                 *ROOT.glob("tools/**/*.sh")]:
        if not path.is_file():  # infra/k8s/crds/keda.sh is a chart folder
            continue
        read |= set(re.findall(r"\$\{?(K4D_[A-Z0-9_]+)", path.read_text()))
    missing = read - scripts - set(settings.variables())
    assert not missing, f"shell scripts read undocumented variables: {sorted(missing)}"


def _k4d_name(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The K4D_* variable a node names: a string literal or a module constant holding one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if node.value.startswith("K4D_") else None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    return None


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def env_reads(source: str, strict: bool) -> list[tuple[int, str]]:
    """(line, variable) of each read of a K4D_* variable: `os.environ.get(V)`,
    `os.environ[V]`, `os.getenv(V)`, `V in os.environ`; with `strict`, also `.get(V)`,
    `[V]` and `V in` on any mapping (code passes `env = os.environ` around)."""
    tree = ast.parse(source)
    constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 and node.value.value.startswith("K4D_")}
    reads = []
    for node in ast.walk(tree):
        name, receiver = None, None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "getenv":
                name, receiver = _k4d_name(node.args[0], constants), "environ"
            elif isinstance(func, ast.Attribute) and func.attr in ("get", "pop"):
                name, receiver = _k4d_name(node.args[0], constants), func.value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name, receiver = _k4d_name(node.slice, constants), node.value
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            name, receiver = _k4d_name(node.left, constants), node.comparators[0]
        if name and (receiver == "environ" or _is_environ(receiver) or strict):
            reads.append((node.lineno, name))
    return reads


def test_the_scan_finds_reads():
    source = ('import os\nV = "K4D_X"\na = os.environ.get("K4D_A")\nb = os.getenv(V)\n'
              'c = "K4D_C" in os.environ\nd = os.environ["K4D_D"]\ne = env.get("K4D_E")\n'
              'child = {"K4D_F": "1"}\nchild["K4D_G"] = "2"\nchild.setdefault("K4D_H", "3")\n')
    assert [v for _, v in env_reads(source, strict=False)] == ["K4D_A", "K4D_X", "K4D_C",
                                                                 "K4D_D"]
    assert sorted(v for _, v in env_reads(source, strict=True)) == [
        "K4D_A", "K4D_C", "K4D_D", "K4D_E", "K4D_X"]


def test_no_code_reads_a_k4d_variable_outside_the_settings():
    found = []
    for top in SCANNED:
        for path in (ROOT / top).rglob("*.py"):
            if path in SETTINGS_MODULES or ".venv" in path.parts or "node_modules" in path.parts:
                continue
            # Tests inspect child env dicts and rendered manifests: only os.environ counts.
            strict = "tests" not in path.relative_to(ROOT).parts
            found += [f"{path.relative_to(ROOT)}:{line}: {name}"
                      for line, name in env_reads(path.read_text(), strict)]
    assert not found, "read these through k4d.settings.current():\n" + "\n".join(found)


def test_current_follows_the_environment(monkeypatch):
    monkeypatch.setenv("K4D_GENERATOR_BACKEND", "onnx")
    assert settings.current().generator.backend == "onnx"
    monkeypatch.setenv("K4D_GENERATOR_BACKEND", "tensorrt")
    assert settings.current().generator.backend == "tensorrt"
    monkeypatch.delenv("K4D_GENERATOR_BACKEND")
    assert settings.current().generator.backend == "torch"


@pytest.mark.parametrize("var, raw, needle", [
    ("K4D_GRPC_PORT", "abc", "expected an integer"),
    ("K4D_GENERATOR_BACKEND", "cuda", "expected one of torch, onnx, tensorrt"),
    ("K4D_TRAINER_LAUNCHER", "slurm", "expected one of local, kubernetes"),
    ("K4D_TRAINER_POLL_S", "0.001", ">= 0.05"),
    ("K4D_FUZZ_CALLS", "many", "expected an integer"),
    ("K4D_WRITE_GOLDEN", "maybe", "expected 0 or 1"),
    ("K4D_TRAIN_AGENT_PID", "x", "expected an integer"),
])
def test_a_bad_value_is_one_line_naming_the_variable(var, raw, needle):
    section = settings.variables()[var].field.split(".")[0]
    with pytest.raises(InvalidArgument) as info:
        getattr(settings.current({var: raw}), section)
    message = str(info.value)
    assert var in message and needle in message and "\n" not in message, message


def test_a_bad_value_fails_only_its_own_section():
    s = settings.current({"K4D_TRAINER_POLL_S": "nan"})
    assert s.generator.backend == "torch" and s.runtime.grpc_port == 0
    with pytest.raises(InvalidArgument):
        _ = s.trainer


def test_every_section_is_an_attribute_of_the_settings():
    s = settings.current({})
    assert all(isinstance(getattr(s, name), cls) for name, cls in settings.SECTIONS.items())
