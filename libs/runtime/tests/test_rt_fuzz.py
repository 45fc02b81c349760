"""k4d.testing.fuzz finds what it is for: an RPC that answers INTERNAL, one that runs past
its deadline, a server whose health changed; and a sound server passes."""

import time

import grpc
import pytest
from google.protobuf.message import DecodeError
from k4d.config import Config
from k4d.grpc_server import create_server, set_serving
from k4d.testing.fuzz import HostileMessages, discover_methods, fuzz_channel, nested_groups
from kinema4d.v1 import common_pb2, generator_pb2, generator_pb2_grpc

SERVICE = "kinema4d.v1.GeneratorService"


class Flawed(generator_pb2_grpc.GeneratorServiceServicer):
    """LoadModel crashes when given a backend, GetModelInfo hangs when given a model,
    Generate takes the service out of rotation; ListModels is sound."""

    def __init__(self, server_ref):
        self.server_ref = server_ref

    def LoadModel(self, request, context):
        if request.backend:
            raise RuntimeError("boom")
        return generator_pb2.LoadModelResponse()

    def GetModelInfo(self, request, context):
        if request.HasField("model"):
            time.sleep(1.0)
        return generator_pb2.GetModelInfoResponse()

    def Generate(self, request, context):  # server streaming
        set_serving(self.server_ref[0], SERVICE, False)
        yield generator_pb2.GenerateResponse()

    def ListModels(self, request, context):
        return generator_pb2.ListModelsResponse()


@pytest.fixture
def channel():
    holder = []

    def register(server, _config):
        holder.append(server)
        generator_pb2_grpc.add_GeneratorServiceServicer_to_server(Flawed(holder), server)
        return [SERVICE]

    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0), [register])
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    server.stop(0)


def test_reflection_lists_every_method(channel):
    paths = {m.path for m in discover_methods(channel)}
    assert {f"/{SERVICE}/{name}" for name in ("LoadModel", "GetModelInfo", "Generate",
                                              "ListModels")} <= paths
    assert not [p for p in paths if "Health" in p or "Reflection" in p]


def test_finds_internal_errors_hangs_and_health_changes(channel):
    # A valid LoadModel request to mutate: most mutations keep its backend, so the crash is
    # found whatever the random stream of the other methods' messages (a new field in any
    # request changes that stream).
    load = generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny"),
                                          backend="torch")
    report = fuzz_channel(channel, calls_per_method=12, seed=1, deadline_s=0.3,
                          seeds={f"/{SERVICE}/LoadModel": [load]})
    problems = "\n".join(report.problems())
    assert f"/{SERVICE}/LoadModel: INTERNAL" in problems
    assert f"/{SERVICE}/GetModelInfo: DEADLINE_EXCEEDED" in problems
    assert "health changed" in problems
    assert not [f for f in report.failures if f.method.endswith("/ListModels")]
    with pytest.raises(AssertionError):
        report.assert_clean()


def test_a_sound_method_passes(channel):
    report = fuzz_channel(channel, calls_per_method=30, seed=2, deadline_s=2.0,
                          services=[SERVICE])
    assert report.codes[f"/{SERVICE}/ListModels"].get("OK", 0) >= 1
    assert not [f for f in report.failures if f.method.endswith("/ListModels")]


def test_mutations_keep_the_rest_of_a_seed():
    import random

    hostile = HostileMessages(random.Random(0))
    seed = generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny"), backend="torch",
                                          precision="fp32")
    changed = [hostile.mutate(seed) for _ in range(50)]
    # Each mutation changes at most three fields, so most keep the backend or precision.
    assert sum(m.backend == "torch" or m.precision == "fp32" for m in changed) >= 40
    assert any(m != seed for m in changed)


def test_nested_groups_are_valid_wire_bytes_until_the_recursion_limit():
    request = generator_pb2.ListModelsRequest
    request.FromString(nested_groups(50))  # unknown fields, parsed and kept
    with pytest.raises(DecodeError):
        request.FromString(nested_groups(5000))
