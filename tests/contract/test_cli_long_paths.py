"""Every `k4d` command refuses an over-long path or URI argument with one line naming the
option and exit code 2 (it raised `OSError: File name too long` with a traceback that
echoed the whole path)."""

from __future__ import annotations

import argparse
import errno

import pytest
from k4d.cli.main import check_path_arguments, main, run_handler

LONG = "/tmp/" + "a" * 5000
LONG_COMPONENT = "/tmp/" + "b" * 300

CASES = [
    (["generate", "--model", LONG, "--image", "x.png", "--robot", "r.npz", "--camera", "c.json",
      "--out", "out"], "generate", "--model"),
    (["fk", "--robot", "panda", "--joints", LONG_COMPONENT, "--out", "x.npz"], "fk", "--joints"),
    (["simulate", "--robot", "panda", "--actions", LONG, "--image", "x.png", "--camera",
      "c.json", "--out", "out"], "simulate", "--actions"),
    (["view", LONG], "view", "dir"),
]


@pytest.mark.parametrize(("argv", "command", "field"), CASES, ids=[c[1] for c in CASES])
def test_over_long_path_is_one_line_and_exit_2(argv, command, field, capsys, tmp_path,
                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"k4d {command}: error: {field}: "), err
    assert len(err) < 300


def test_name_too_long_from_the_os_is_one_line(capsys):
    def handler(_args):
        raise OSError(errno.ENAMETOOLONG, "File name too long", "x" * 5000)

    args = argparse.Namespace(command="demo", handler=handler)
    assert run_handler(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("k4d demo: error: a path is too long: xxx") and len(err) < 300


def test_other_os_errors_still_raise():
    def handler(_args):
        raise OSError(errno.EIO, "I/O error")

    with pytest.raises(OSError):
        run_handler(argparse.Namespace(command="demo", handler=handler))


def test_json_and_free_text_arguments_are_not_paths():
    check_path_arguments(argparse.Namespace(
        recipe_json="{" + '"a": "/x",' * 1000 + "}", text="word " * 1000,
        spec='{"x": "' + "q" * 400 + '/y"}'))
