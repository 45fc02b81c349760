"""`k4d eval agreement`: success labels from a CSV or JSON table -> agreement.json."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from k4d.errors import InvalidArgument

from k4d_eval.policy import agreement_table
from k4d_eval.report import write_json

LABEL_COLUMNS = ("true_success", "simulated_success")
_TRUE = {"1", "true", "yes", "success"}
_FALSE = {"0", "false", "no", "failure", "fail"}


def _bool(value, where: str) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text in ("", "none", "null", "unknown"):
        return None
    raise InvalidArgument.for_field(where, f"expected a success label (true/false/1/0), got {value!r}")


def read_labels(path: Path) -> list[dict]:
    if not path.is_file():
        raise InvalidArgument.for_field("labels", f"no such file: {path}")
    try:
        if path.suffix.lower() == ".json":
            rows = json.loads(path.read_text())
        else:
            with path.open(newline="") as f:
                rows = list(csv.DictReader(f))
    except (ValueError, csv.Error, UnicodeDecodeError) as exc:
        raise InvalidArgument.for_field("labels", f"cannot read {path}: {exc}") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise InvalidArgument.for_field("labels", f"{path}: expected a non-empty list of rows")
    missing = [c for c in LABEL_COLUMNS if c not in rows[0]]
    if missing:
        raise InvalidArgument.for_field("labels", f"{path}: missing columns {missing}")
    return [dict(r, **{c: _bool(r.get(c), f"labels[{i}].{c}") for c in LABEL_COLUMNS})
            for i, r in enumerate(rows)]


def write_agreement(out: Path, rows: list[dict]) -> dict:
    section = agreement_table(rows)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "agreement.json", section)
    return section
