"""`k4d` entry point: builds the parser from the runtime's own commands plus every
installed service's `register(subparsers)` (entry-point group `k4d.cli`), runs the
chosen handler and maps domain errors to one clear line and an exit code."""

from __future__ import annotations

import argparse
import errno
import sys
from importlib.metadata import entry_points
from pathlib import PurePath

from k4d.errors import K4DError
from k4d.limits import check_uri
from k4d.logs import clip


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


def _looks_like_path(value) -> bool:
    if isinstance(value, PurePath):
        return True
    return isinstance(value, str) and "/" in value and not value.lstrip().startswith(("{", "["))


def argument_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> what the user typed it as (`--out`, or the positional's name), over every
    (sub)command of `parser`."""
    names: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names.update(argument_names(sub))
        elif action.option_strings:
            names.setdefault(action.dest, max(action.option_strings, key=len))
        else:
            names.setdefault(action.dest, action.dest)
    return names


def check_path_arguments(args: argparse.Namespace, names: dict[str, str] | None = None) -> None:
    """Every path or URI argument within the OS's bounds (k4d.limits.check_uri), else
    InvalidArgument naming its option: a 5 kB path is bad input, not an OSError traceback."""
    for dest, value in vars(args).items():
        if dest.endswith("_json"):
            continue
        for item in value if isinstance(value, list | tuple) else (value,):
            if _looks_like_path(item):
                check_uri(str(item), (names or {}).get(dest, "--" + dest.replace("_", "-")))


def run_handler(args: argparse.Namespace, names: dict[str, str] | None = None) -> int:
    """Run the parsed command; domain and path errors become one stderr line + exit code.
    `names`: `argument_names(parser)`, for error messages naming positionals right."""
    try:
        check_path_arguments(args, names)
        code = args.handler(args)
    except K4DError as exc:
        sys.stderr.write(f"k4d {args.command}: error: {clip(exc)}\n")
        return exc.cli_exit_code
    except PATH_ERRORS as exc:
        sys.stderr.write(f"k4d {args.command}: error: {clip(exc)}\n")
        return 2
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        sys.stderr.write(f"k4d {args.command}: error: a path is too long: {clip(exc.filename, 120)}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # botocore's, met deep inside s3fs/minio callers: bad configuration, not a crash.
        if type(exc).__name__ != "NoCredentialsError":
            raise
        sys.stderr.write(f"k4d {args.command}: error: no S3 credentials: set K4D_S3_ACCESS_KEY and "
                         "K4D_S3_SECRET_KEY (docs/configuration.md) or an AWS credentials chain\n")
        return 2
    return int(code or 0)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    return run_handler(parser.parse_args(argv), argument_names(parser))


if __name__ == "__main__":
    raise SystemExit(main())
