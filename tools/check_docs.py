"""Docs say what is true now (issue 46 point 4): `make lint` runs this, and
tests/contract/test_docs_check.py too. Two checks over docs/*.md, README.md and
models/*/README.md:

- no markdown table cell longer than MAX_CELL_CHARS characters: a table row is a summary;
  detail goes into prose under the table;
- no round-by-round history ("round 12", "this round"): what changed and when belongs in
  CHANGELOG.md and git, a document says what holds now.

Usage: python tools/check_docs.py   (exit 1 and one line per problem when there are any)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC_GLOBS = ("docs/*.md", "README.md", "models/*/README.md")
MAX_CELL_CHARS = 300
HISTORY = re.compile(r"\b(?:rounds? \d+|this round|last round|previous round|next round)\b",
                     re.IGNORECASE)
# Files the checks know to fail today, each with what removes it from this list.
KNOWN_EXCEPTIONS: dict[str, str] = {}


def doc_files(repo: Path = REPO) -> list[Path]:
    return sorted({path for pattern in DOC_GLOBS for path in repo.glob(pattern)})


def table_cells(line: str) -> list[str]:
    """The cells of a markdown table row (`| a | b |`), escaped pipes kept; [] otherwise."""
    row = line.strip()
    if not (row.startswith("|") and row.endswith("|") and len(row) > 1):
        return []
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row[1:-1])]


def problems(text: str) -> list[str]:
    """One line per problem in a markdown document: `LINE: what`."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        for cell in table_cells(line):
            if len(cell) > MAX_CELL_CHARS:
                found.append(f"{number}: table cell of {len(cell)} characters (at most "
                             f"{MAX_CELL_CHARS}): {cell[:60]}...")
        for match in HISTORY.finditer(line):
            found.append(f"{number}: round-by-round history ({match.group(0)!r}): move it to "
                         "CHANGELOG.md")
    return found


def check(repo: Path = REPO) -> tuple[list[str], list[str]]:
    """(problems, stale exceptions): problems in files not listed in KNOWN_EXCEPTIONS, and
    listed files that have none left (drop them from the list)."""
    found, clean_exceptions = [], []
    for path in doc_files(repo):
        relative = path.relative_to(repo).as_posix()
        lines = problems(path.read_text())
        if relative in KNOWN_EXCEPTIONS:
            if not lines:
                clean_exceptions.append(relative)
            continue
        found += [f"{relative}:{line}" for line in lines]
    return found, clean_exceptions


def main() -> int:
    found, stale = check()
    for line in found:
        print(line, file=sys.stderr)
    for relative in stale:
        print(f"{relative}: passes now, drop it from KNOWN_EXCEPTIONS in tools/check_docs.py",
              file=sys.stderr)
    return 1 if found or stale else 0


if __name__ == "__main__":
    sys.exit(main())
