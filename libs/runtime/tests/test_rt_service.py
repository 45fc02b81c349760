"""`k4d.service.load_service`: one service object per process from the k4d.services entry
point, for a Service class (gRPC side and worker share its state) and for a plug-in given
as functions (wrapped). Plug-ins are real entry points (a dist-info on sys.path)."""

from __future__ import annotations

import sys
import textwrap

import pytest
from k4d.config import load_config
from k4d.errors import InvalidArgument
from k4d.service import FunctionService, Service, load_service
from k4d.testing.plugins import write_plugin

PLUGIN = textwrap.dedent('''
    from k4d.service import Service

    class CounterService(Service):
        """gRPC side and worker share one counter: the state a service object holds."""

        def __init__(self, config):
            super().__init__(config)
            self.shared = {"config": config}

        def register(self, server):
            return ["k4d.rtsvc.Counter"]

        def build_worker(self, bus, store):
            return ("worker", self.shared, bus, store)

    def register_fn(server, config):
        return ["k4d.rtsvc.Fn"]

    def build_fn_worker(config, bus, store):
        return ("fn-worker", config, bus, store)
''')


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    write_plugin(tmp_path, "k4d_rtsvc_plugin", PLUGIN, {
        "k4d.services": {"rtsvc": "k4d_rtsvc_plugin:CounterService",
                         "rtfn": "k4d_rtsvc_plugin:register_fn",
                         "rtnoworker": "k4d_rtsvc_plugin:register_fn"},
        "k4d.workers": {"rtfn": "k4d_rtsvc_plugin:build_fn_worker"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("k4d_rtsvc_plugin", None)


def test_rt_service_class_is_built_once_and_shared(plugins):
    config = load_config(env={}, service_name="rtsvc")
    service = load_service("rtsvc", config, with_worker=True)
    assert isinstance(service, Service) and type(service).__name__ == "CounterService"
    assert list(service.register(server=None)) == ["k4d.rtsvc.Counter"]
    kind, shared, bus, store = service.build_worker("bus", "store")
    assert kind == "worker" and shared is service.shared and shared["config"] is config


def test_rt_service_functions_are_wrapped(plugins):
    config = load_config(env={})
    service = load_service("rtfn", config, with_worker=True)
    assert isinstance(service, FunctionService)
    assert service.register(server=None) == ["k4d.rtsvc.Fn"]
    assert service.build_worker("bus", "store") == ("fn-worker", config, "bus", "store")
    assert load_service("rtnoworker", config).build_worker("bus", "store") is None


@pytest.mark.parametrize("name, with_worker, field", [("no-such", False, "service"),
                                                      ("rtnoworker", True, "--worker")])
def test_rt_service_unknown_or_without_worker_is_invalid(plugins, name, with_worker, field):
    with pytest.raises(InvalidArgument) as info:
        load_service(name, load_config(env={}), with_worker=with_worker)
    assert info.value.violations[0].field == field
