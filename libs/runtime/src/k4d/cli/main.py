"""`k4d` entry point: builds the parser from the runtime's own commands plus every
installed service's `register(subparsers)` (entry-point group `k4d.cli`), runs the
chosen handler and maps domain errors to one clear line and an exit code."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from k4d.errors import K4DError


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse hook
        sys.stderr.write(f"k4d: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="k4d", description="Kinema4D: action-conditioned 4D robot simulation")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    from k4d.cli import builtin

    builtin.register(sub)
    for ep in sorted(entry_points(group="k4d.cli"), key=lambda e: e.name):
        try:
            register = ep.load()
        except ImportError as exc:
            # One broken or half-installed service must not take every other command down.
            sys.stderr.write(f"k4d: warning: commands of {ep.name!r} unavailable: {exc}\n")
            continue
        register(sub)
    return parser


# A user-given path that cannot be read or written is bad input, not a crash.
PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
               PermissionError)


def run_handler(args: argparse.Namespace) -> int:
    """Run the parsed command; domain and path errors become one stderr line + exit code."""
    try:
        code = args.handler(args)
    except K4DError as exc:
        sys.stderr.write(f"k4d {args.command}: error: {exc}\n")
        return exc.cli_exit_code
    except PATH_ERRORS as exc:
        sys.stderr.write(f"k4d {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    return int(code or 0)


def main(argv: list[str] | None = None) -> int:
    return run_handler(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
