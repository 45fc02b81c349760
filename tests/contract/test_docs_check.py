"""Docs say what is true now (issue 46 point 4): tools/check_docs.py, which `make lint`
runs too: no table cell over 300 characters, no round-by-round history."""

from __future__ import annotations

from pathlib import Path

from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
docs = load_path_module(REPO / "tools" / "check_docs.py", "k4d_tools_check_docs")


def test_the_docs_pass_and_the_known_exceptions_are_still_needed():
    found, stale = docs.check()
    assert not found, "\n".join(found)
    assert not stale, f"these pass now, drop them from KNOWN_EXCEPTIONS: {stale}"


def test_the_check_covers_docs_the_readme_and_the_model_cards():
    names = {path.relative_to(REPO).as_posix() for path in docs.doc_files()}
    assert {"README.md", "docs/benchmarks.md", "models/demo-small/README.md"} <= names


def test_a_long_cell_and_round_history_are_found_outside_code_blocks():
    text = ("| a | b |\n|---|---|\n| short | " + "x" * 301 + " |\n"
            "In round 12 we tried it.\n```\nround 3 in a code block\n```\n| " + "y" * 300 + " |\n")
    found = docs.problems(text)
    assert len(found) == 2
    assert found[0].startswith("3: table cell of 301 characters")
    assert found[1].startswith("4: round-by-round history ('round 12')")


def test_escaped_pipes_stay_inside_a_cell():
    assert docs.table_cells(r"| a \| b | c |") == [r"a \| b", "c"]


def test_every_benchmark_script_is_listed_in_docs_benchmarks():
    """benchmarks/ holds benchmarks (issue 46 point 5): each script there is listed in
    docs/benchmarks.md with what it measures, or it leaves the repository."""
    listed = (REPO / "docs" / "benchmarks.md").read_text()
    scripts = sorted(path.relative_to(REPO).as_posix() for pattern in ("*.py", "*.sh")
                     for path in (REPO / "benchmarks").rglob(pattern)
                     if "wheels" not in path.parts and "__pycache__" not in path.parts)
    missing = [script for script in scripts if f"`{script}`" not in listed]
    assert not missing, f"not listed in docs/benchmarks.md: {missing}"
