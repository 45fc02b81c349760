"""Issue 47 under `k4d up` as a user starts it (TLS and tokens on by default): who gets
in, who is refused with which one line or status, jobs that belong to their submitter, an
operator who may do everything, the reflection fuzz with credentials, and the embedded
mode, which needs none of this."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from k4d import auth
from k4d.grpc_client import ClientSecurity, create_channel

pytestmark = pytest.mark.integration  # in `make test`: issue 47 is done when this passes
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "panda_pick"
SERVICES = ["generator", "simulator", "trainer"]
SECURITY_VARS = ("K4D_TLS_CA", "K4D_TOKEN", "K4D_TLS_CERT", "K4D_TLS_KEY", "K4D_AUTH_TOKENS")
SPEC_ARGS = ["--robot", "panda", "--actions", str(EXAMPLE / "actions.json"), "--image",
             str(EXAMPLE / "scene.png"), "--camera", str(EXAMPLE / "camera.json"),
             "--frames", "5", "--downscale", "15", "--backend", "static-world"]


def _k4d(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k4d.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _one_line_error(done: subprocess.CompletedProcess, *expected: str) -> str:
    """The command failed with exactly one stderr line containing every `expected`."""
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    from k4d.testing.processes import k4d_up

    env = {k: v for k, v in os.environ.items() if k not in SECURITY_VARS}
    env.update(OMP_NUM_THREADS="1", K4D_SIMULATOR_DEFAULT_MODEL="static-world")
    state = tmp_path_factory.mktemp("up-secure")
    with k4d_up(SERVICES, state, env) as cluster:
        yield cluster, state


@pytest.fixture(scope="module")
def bob(up):
    """A second user added to the running cluster's token file (re-read within 1 s)."""
    cluster, state = up
    token_file = state / "bob.token"
    auth.write_secret(token_file, "bob-secret-token\n")
    with (state / "auth-tokens").open("a") as out:
        out.write(auth.token_line("user", "bob", "bob-secret-token") + "\n")
    time.sleep(1.5)
    return token_file


@pytest.fixture(scope="module")
def users_job(up):
    cluster, _ = up
    done = _k4d("submit", *SPEC_ARGS, "--address", cluster.addresses["simulator"],
                env=cluster.client_env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


def _plain_env(cluster) -> dict:
    return {k: v for k, v in cluster.client_env.items() if k not in SECURITY_VARS}


def test_the_printed_exports_name_the_ca_and_the_users_token(up):
    cluster, state = up
    assert cluster.client_env["K4D_TLS_CA"] == str(state / "tls" / "ca.pem")
    assert cluster.client_env["K4D_TOKEN"]
    assert cluster.operator_token == str(state / "tokens" / "operator.token")
    assert "INSECURE" not in cluster.table


def test_without_the_ca_the_cli_refuses_in_one_line(up):
    cluster, _ = up
    address = cluster.addresses["simulator"]
    started = time.monotonic()
    done = _k4d("jobs", "--address", address, env=_plain_env(cluster))
    _one_line_error(done, address, "TLS", "K4D_TLS_CA")
    assert time.monotonic() - started < 60  # not a hang


def test_without_a_token_the_cli_is_unauthenticated(up):
    cluster, _ = up
    env = dict(_plain_env(cluster), K4D_TLS_CA=cluster.client_env["K4D_TLS_CA"])
    _one_line_error(_k4d("jobs", "--address", cluster.addresses["simulator"], env=env),
                    "UNAUTHENTICATED", "no token")
    with create_channel(cluster.addresses["simulator"],
                        security=ClientSecurity(tls_ca=env["K4D_TLS_CA"])) as channel:
        with pytest.raises(grpc.RpcError) as error:
            channel.unary_unary("/kinema4d.v1.SimulatorService/ListJobs")(b"", timeout=30)
    assert error.value.code() is grpc.StatusCode.UNAUTHENTICATED


def test_a_user_may_not_load_models_or_train(up):
    from kinema4d.v1 import (
        common_pb2,
        generator_pb2,
        generator_pb2_grpc,
        trainer_pb2,
        trainer_pb2_grpc,
    )

    cluster, _ = up
    calls = [
        ("generator", lambda c: generator_pb2_grpc.GeneratorServiceStub(c).LoadModel(
            generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="x")), timeout=30)),
        ("trainer", lambda c: trainer_pb2_grpc.TrainerServiceStub(c).SubmitTrainingJob(
            trainer_pb2.SubmitTrainingJobRequest(), timeout=30)),
    ]
    for service, call in calls:
        with create_channel(cluster.addresses[service], security=cluster.security()) as channel:
            with pytest.raises(grpc.RpcError) as error:
                call(channel)
        assert error.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "role 'user' (user) may not call" in error.value.details()


def test_one_user_cannot_see_or_cancel_anothers_job(up, bob, users_job):
    cluster, _ = up
    address, ca = cluster.addresses["simulator"], cluster.client_env["K4D_TLS_CA"]
    as_bob = ["--address", address, "--tls-ca", ca, "--token-file", str(bob)]
    env = _plain_env(cluster)
    _one_line_error(_k4d("jobs", users_job, *as_bob, env=env), "no job with id")
    _one_line_error(_k4d("jobs", users_job, "--cancel", *as_bob, env=env), "no job with id")
    listed = _k4d("jobs", *as_bob, env=env)
    assert listed.returncode == 0 and users_job not in listed.stdout, listed.stderr
    mine = _k4d("jobs", "--address", address, env=cluster.client_env)
    assert mine.returncode == 0 and users_job in mine.stdout, mine.stderr
    shown = _k4d("jobs", users_job, "--address", address, "--json", env=cluster.client_env)
    assert '"owner": "user"' in shown.stdout
    assert "cancelRequested" not in shown.stdout and "CANCELLED" not in shown.stdout


def test_an_operator_can_do_everything(up, users_job):
    from kinema4d.v1 import (
        common_pb2,
        generator_pb2,
        generator_pb2_grpc,
        simulator_pb2,
        simulator_pb2_grpc,
        trainer_pb2,
        trainer_pb2_grpc,
    )

    cluster, _ = up
    operator = cluster.operator()
    with create_channel(cluster.addresses["simulator"], security=operator) as channel:
        stub = simulator_pb2_grpc.SimulatorServiceStub(channel)
        listed = [j.job_id for j in stub.ListJobs(simulator_pb2.ListJobsRequest(), timeout=30).jobs]
        assert users_job in listed
        job = stub.Cancel(simulator_pb2.CancelRequest(job_id=users_job), timeout=30).job
        assert job.owner == "user"
        assert job.cancel_requested or job.state == simulator_pb2.JOB_STATE_CANCELLED
    with create_channel(cluster.addresses["generator"], security=operator) as channel:
        with pytest.raises(grpc.RpcError) as error:  # past the roles check: the model's lookup
            generator_pb2_grpc.GeneratorServiceStub(channel).LoadModel(
                generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="no-such-model")),
                timeout=60)
        assert error.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    with create_channel(cluster.addresses["trainer"], security=operator) as channel:
        trainer = trainer_pb2_grpc.TrainerServiceStub(channel)
        trainer.ListTrainingJobs(trainer_pb2.ListTrainingJobsRequest(), timeout=30)
        with pytest.raises(grpc.RpcError) as error:  # an empty spec: refused by validation
            trainer.SubmitTrainingJob(trainer_pb2.SubmitTrainingJobRequest(), timeout=30)
        assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_the_reflection_fuzz_stays_clean_with_credentials(up):
    from k4d.testing.fuzz import fuzz_server

    cluster, _ = up
    for service in ("simulator", "generator"):
        report = fuzz_server(cluster.addresses[service], cluster.operator(), calls_per_method=10,
                             seed=47, deadline_s=30.0)
        assert report.codes and report.calls == 10 * len(report.codes), report.summary()
        assert not any("INTERNAL" in codes for codes in report.codes.values()), report.summary()
        report.assert_clean()


def test_the_embedded_mode_needs_none_of_this(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in SECURITY_VARS}
    done = _k4d("simulate", *SPEC_ARGS, "--out", str(tmp_path / "out"), "--no-progress",
                env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "summary.json").is_file()
