"""`k4d serve` and `k4d up`, in-process for argument errors and as real subprocesses with a
throw-away service plug-in (entry points declared by a dist-info on PYTHONPATH)."""

import argparse
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from k4d.cli.main import main, run_handler
from k4d.cli.up import plan_ports
from k4d.local_servers import free_port, s3_server_available
from k4d.testing.plugins import write_plugin
from k4d.testing.pytest_plugin import server_unavailable

PLUGIN = textwrap.dedent('''
    import grpc
    from k4d.bus import StageWorker

    SERVICE = "k4d.rttest.Echo"

    def register_service(server, config):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)}),))
        return [SERVICE]

    def build_worker(config, bus, store):
        return StageWorker.from_config(config, bus, "k4d.sim.requested", "rttest", lambda m: None)
''')


@pytest.fixture
def plugin_env(tmp_path):
    write_plugin(tmp_path, "k4d_rttest_plugin", PLUGIN, {
        "k4d.services": {"rttest": "k4d_rttest_plugin:register_service"},
        "k4d.workers": {"rttest": "k4d_rttest_plugin:build_worker"}})
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("K4D_KAFKA_BOOTSTRAP", None)
    env["K4D_STORE_URI"] = (tmp_path / "store").as_uri()
    # Test-sized group timeouts for the services' stage workers under `k4d up`.
    env["K4D_KAFKA_SESSION_TIMEOUT_MS"] = "3000"
    env["K4D_KAFKA_MAX_POLL_INTERVAL_MS"] = "6000"
    return env


def k4d(*args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "k4d.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_serve_unknown_service_is_one_line_and_exit_2(capsys):
    from k4d.cli import serve

    assert main(["serve", "no-such-service"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("k4d serve: error: service: unknown service 'no-such-service'")
    assert serve.main(["no-such-service", "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith("k4d serve: error: service: unknown service")


@pytest.mark.parametrize("error", [NotADirectoryError(20, "Not a directory", "/dev/null/x"),
                                   FileExistsError(17, "File exists", "/dev/null")])
def test_path_errors_from_a_handler_are_one_line_and_exit_2(capsys, error):
    def handler(args):
        raise error

    assert run_handler(argparse.Namespace(command="fk", handler=handler)) == 2
    err = capsys.readouterr().err
    assert err.startswith("k4d fk: error: ") and err.count("\n") == 1


def test_missing_s3_credentials_from_any_handler_are_one_line_and_exit_2(capsys):
    """botocore's NoCredentialsError (an s3:// URI with no K4D_S3_ACCESS_KEY and no AWS
    chain, met deep inside s3fs by k4d train/eval/datagen) is bad configuration, not a crash."""
    from botocore.exceptions import NoCredentialsError

    def handler(args):
        raise NoCredentialsError()

    assert run_handler(argparse.Namespace(command="train", handler=handler)) == 2
    err = capsys.readouterr().err
    assert err.startswith("k4d train: error: ") and err.count("\n") == 1 and "K4D_S3_ACCESS_KEY" in err


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_serve_rejects_ports_out_of_range_before_starting(capsys, flag):
    with pytest.raises(SystemExit) as info:
        main(["serve", "no-such-service", flag, "99999"])
    assert info.value.code == 2
    assert "0..65535" in capsys.readouterr().err


def test_up_rejects_bad_options(capsys):
    assert main(["up", "--base-port", "80"]) == 2
    assert "--base-port" in capsys.readouterr().err
    assert main(["up", "--services", "nope"]) == 2
    for timeout in ("0", "-5", "nan", "inf"):
        assert main(["up", "--timeout", timeout]) == 2
        assert "--timeout" in capsys.readouterr().err


def test_port_plans():
    standard = plan_ports(None, ["kinematics", "simulator"])
    assert (standard.broker, standard.s3, standard.services["kinematics"]) == (9092, 9000, (50051, 9101))
    block = plan_ports(20000, ["a", "b"])
    assert (block.broker, block.s3, block.services) == (20000, 20001, {"a": (20010, 20030), "b": (20011, 20031)})
    free = plan_ports(0, ["a"])
    assert len({free.broker, free.s3, *free.services["a"]}) == 4


@pytest.mark.integration
def test_serve_answers_health_and_stops_on_sigterm(plugin_env):
    from k4d.grpc_client import wait_healthy

    port = free_port()
    env = dict(plugin_env, K4D_SHUTDOWN_GRACE_S="2", K4D_METRICS_PORT="0")
    proc = subprocess.Popen([sys.executable, "-m", "k4d.cli.serve", "rttest", "--port", str(port),
                             "--host", "127.0.0.1", "--worker"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_healthy(f"127.0.0.1:{port}", "k4d.rttest.Echo", timeout_s=30,
                            should_abort=lambda: proc.poll() is not None), proc.stdout.read() if proc.poll() else ""
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = proc.stdout.read()
    assert '"message": "shutting down"' in log and '"message": "stage worker stopped"' in log


@pytest.mark.integration
def test_up_check_starts_broker_s3_and_services_healthy(plugin_env, tmp_path):
    try:
        from k4d.local_servers import tansu_binary

        tansu_binary()
    except Exception as exc:
        server_unavailable(f"broker package missing: {exc}")
    if not s3_server_available():
        server_unavailable("moto[server] missing")
    result = k4d("up", "--check", "--base-port", "0", "--services", "rttest", "--log-dir", str(tmp_path / "logs"), env=plugin_env)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
            if line.split() and line.split()[0] in ("broker", "s3", "rttest")}
    assert rows["broker"][-1] == rows["s3"][-1] == rows["rttest"][-1] == "healthy"
    assert (tmp_path / "logs" / "rttest.log").is_file()
    # Secure by default: a CA, a server certificate and tokens in the state directory, the
    # exports name the CA and the user's token, and the operator's token file is printed.
    logs = tmp_path / "logs"
    exports = dict(kv.split("=", 1) for line in result.stdout.splitlines()
                   if line.startswith("clients: export ") for kv in line.split()[2:])
    assert exports["K4D_TLS_CA"] == str(logs / "tls" / "ca.pem")
    assert exports["K4D_TOKEN"] == (logs / "tokens" / "user.token").read_text().strip()
    assert f"operator token: {logs / 'tokens' / 'operator.token'}" in result.stdout
    assert (logs / "tls" / "server-key.pem").stat().st_mode & 0o077 == 0
    roles = [line.split()[0] for line in (logs / "auth-tokens").read_text().splitlines()
             if not line.startswith("#")]
    assert sorted(roles) == ["operator", "service", "user"]
    assert exports["K4D_TOKEN"] not in (logs / "auth-tokens").read_text()  # hashes only
    assert "INSECURE" not in result.stdout + result.stderr


def _up_until_running(env, tmp_path, *flags: str):
    """`k4d up` with the rttest service, its output read until it runs -> (process, lines)."""
    proc = subprocess.Popen([sys.executable, "-u", "-m", "k4d.cli.main", "up", *flags,
                             "--base-port", "0", "--services", "rttest", "--no-workers",
                             "--log-dir", str(tmp_path / "logs")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C to stop" in line:
            break
    return proc, lines


@pytest.mark.integration
def test_up_insecure_says_so_and_serves_plaintext(plugin_env, tmp_path):
    from k4d.grpc_client import wait_healthy

    if not s3_server_available():
        server_unavailable("moto[server] missing")
    env = dict(plugin_env, K4D_AUTH_TOKENS=str(tmp_path / "ignored"))  # --insecure drops it
    proc, lines = _up_until_running(env, tmp_path, "--insecure")
    try:
        text = "".join(lines)
        assert "k4d up: INSECURE (--insecure): no TLS and no tokens" in text, text
        assert "K4D_TLS_CA" not in text and "operator token:" not in text
        [address] = [line.split()[2] for line in lines if line.startswith("rttest")]
        assert wait_healthy(address, "k4d.rttest.Echo", timeout_s=10)  # plaintext answers
        assert not (tmp_path / "logs" / "tls").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


@pytest.mark.integration
def test_up_stops_every_child_on_ctrl_c(plugin_env, tmp_path):
    from k4d.cli.up import CHILD_GRACE_S
    from k4d.local_servers import port_open

    if not s3_server_available():
        server_unavailable("moto[server] missing")
    proc, lines = _up_until_running(plugin_env, tmp_path)
    try:
        rows = [line.split() for line in lines if line.split()[:1] in (["broker"], ["s3"], ["rttest"])]
        addresses = [row[2].removeprefix("http://") for row in rows]
        assert len(addresses) == 3 and all(row[-1] == "healthy" for row in rows), "".join(lines)
        proc.send_signal(signal.SIGINT)
        # each of the 3 children gets CHILD_GRACE_S after SIGTERM, then SIGKILL and 5 s more,
        # one after another: a loaded machine can use most of that (30 s once timed out in CI)
        assert proc.wait(3 * (CHILD_GRACE_S + 5.0) + 10.0) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for address in addresses:
        host, port = address.split(":")
        assert not port_open(host, int(port)), f"{address} still open after k4d up stopped"


def test_up_refuses_busy_ports_with_one_line(capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        if port > 65495:
            pytest.skip("ephemeral port above the --base-port range")
        assert main(["up", "--check", "--base-port", str(port), "--services", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("k4d up: error: ports already in use: [") and str(port) in err
