"""`python -m k4d.cli.serve <service> ...`: `k4d serve` without loading every installed
CLI plug-in (a service process should import only its own code; `k4d up` uses this)."""

from __future__ import annotations

import sys

from k4d.cli import builtin
from k4d.cli.main import _Parser, run_handler


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="k4d")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    builtin.register_serve(sub)
    return run_handler(parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    raise SystemExit(main())
