import dataclasses

import pytest
from k4d.config import SERVICE_PORTS, Config, load_config
from k4d.errors import InvalidArgument


def test_defaults_without_env():
    config = load_config(env={})
    assert config.grpc_port == 0
    assert config.grpc_max_message_bytes == 64 << 20
    assert config.kafka_bootstrap == ""  # in-process bus
    assert config.store_uri.startswith("file://") and config.store_uri.endswith(".k4d/store")
    assert config.shutdown_grace_s == 20.0


def test_service_defaults_then_env_then_overrides():
    assert load_config("projection", env={}).grpc_port == SERVICE_PORTS["projection"][0]
    env = {"K4D_GRPC_PORT": "6000", "K4D_METRICS_PORT": "0", "K4D_S3_SECURE": "1",
           "K4D_KAFKA_BOOTSTRAP": "127.0.0.1:9092", "K4D_STORE_URI": "s3://bucket-a",
           "K4D_SHUTDOWN_GRACE_S": "2.5", "OTEL_SERVICE_NAME": "kin-a"}
    config = load_config("kinematics", env=env)
    assert (config.grpc_port, config.metrics_port, config.s3_secure) == (6000, 0, True)
    assert config.kafka_bootstrap == "127.0.0.1:9092" and config.store_uri == "s3://bucket-a"
    assert config.shutdown_grace_s == 2.5 and config.service_name == "kin-a"
    assert load_config("kinematics", env=env, grpc_port=7000, metrics_port=None).grpc_port == 7000


def test_config_is_frozen_and_replace_ignores_none():
    config = load_config(env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.grpc_port = 1
    assert config.replace(grpc_port=5, log_level=None).grpc_port == 5
    assert isinstance(config, Config)


@pytest.mark.parametrize("var,value,needle", [
    ("K4D_GRPC_PORT", "abc", "expected an integer"),
    ("K4D_GRPC_PORT", "-1", "must be >= 0"),
    ("K4D_S3_SECURE", "maybe", "expected 0 or 1"),
    ("K4D_STORE_URI", "/tmp/x", "file:///path or s3://bucket"),
    ("K4D_LOG_LEVEL", "LOUD", "DEBUG/INFO"),
    ("K4D_WORKER_MAX_ATTEMPTS", "0", "must be >= 1"),
    ("K4D_WORKER_BACKOFF_S", "nan", "finite"),
    ("K4D_GRPC_PORT", "99999", "0..65535"),
    ("K4D_METRICS_PORT", "65536", "0..65535"),
    ("K4D_SHUTDOWN_GRACE_S", "inf", "finite"),
])
def test_bad_env_values_name_the_variable(var, value, needle):
    with pytest.raises(InvalidArgument) as info:
        load_config(env={var: value})
    assert info.value.violations[0].field == var
    assert needle in str(info.value)


def test_every_setting_is_documented():
    from pathlib import Path

    from k4d.config import ENV_VARS

    doc = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    missing = [var for var in ENV_VARS if f"`{var}`" not in doc]
    missing += [f.name for f in dataclasses.fields(Config) if f"`runtime.{f.name}`" not in doc]
    assert not missing, f"document these in docs/configuration.md: {missing}"


def test_importing_the_runtime_never_imports_torch():
    import subprocess
    import sys

    modules = ["k4d", "k4d.config", "k4d.errors", "k4d.tensor_io", "k4d.store", "k4d.store.s3",
               "k4d.bus", "k4d.bus.kafka", "k4d.telemetry", "k4d.grpc_server", "k4d.grpc_client",
               "k4d.local_servers", "k4d.cli.builtin", "k4d.cli.up"]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
