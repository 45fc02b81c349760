"""No import circle among our packages (issue 46 point 2), function-level imports included:
tools/check_import_cycles.py, which `make lint` runs too."""

from __future__ import annotations

from pathlib import Path

from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
cycles = load_path_module(REPO / "tools" / "check_import_cycles.py", "k4d_tools_import_cycles")


def test_every_service_and_library_package_is_checked():
    assert {"k4d", "k4d_model", "k4d_generator", "k4d_simulator", "k4d_embedded",
            "k4d_policy"} <= set(cycles.our_packages())
    assert "kinema4d" not in cycles.our_packages()


def test_no_import_circle_among_our_packages():
    circles = cycles.import_circles()
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_circle_hidden_in_a_function_is_found(tmp_path, monkeypatch):
    _package(tmp_path, "cyc_hidden", {
        "__init__.py": "",
        "a.py": "def f():\n    from cyc_hidden.b import g\n    return g\n",
        "b.py": "from cyc_hidden.a import f\n\ndef g():\n    return f\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles.import_circles(["cyc_hidden"]) == [["cyc_hidden.a", "cyc_hidden.b", "cyc_hidden.a"]]


def test_a_circle_through_a_package_init_is_found(tmp_path, monkeypatch):
    """pkg/__init__ imports pkg.worker -> events -> pkg.base, which runs pkg/__init__ first."""
    _package(tmp_path, "cyc_init", {
        "__init__.py": "",
        "pkg/__init__.py": "from cyc_init.pkg.worker import run\n",
        "pkg/base.py": "X = 1\n",
        "pkg/worker.py": "def run():\n    from cyc_init.events import y\n    return y\n",
        "events.py": "from cyc_init.pkg.base import X\n\ny = X\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles.import_circles(["cyc_init"]) == [
        ["cyc_init.events", "cyc_init.pkg", "cyc_init.pkg.worker", "cyc_init.events"]]


def test_type_checking_imports_and_imports_inside_a_package_are_no_circle(tmp_path, monkeypatch):
    _package(tmp_path, "cyc_none", {
        "__init__.py": "",
        "pkg/__init__.py": "from cyc_none.pkg.worker import run\n",
        "pkg/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from cyc_none.pkg.worker import run\n",
        "pkg/worker.py": "from cyc_none.pkg.base import TYPE_CHECKING\n\ndef run():\n    return 1\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles.import_circles(["cyc_none"]) == []
