"""GeneratorService over a real loopback gRPC server (port 0): readiness follows LoadModel,
Generate streams one progress message per step then the result (large outputs as refs),
model listing/info from the registry, error codes."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from k4d.config import Config
from k4d.grpc_client import field_violations
from k4d.grpc_server import create_server
from k4d.store import LocalStore, from_tensor_data
from k4d.tensor_io import to_tensor
from k4d.testing.tool_tracks import bad_tool_messages
from k4d.tool import ToolTrack
from k4d.tool_proto import tool_to_proto
from k4d_generator.server import SERVICE_NAME, register_service
from k4d_generator.service import ModelManager
from k4d_model import registry
from kinema4d.v1 import common_pb2, generator_pb2, generator_pb2_grpc


@pytest.fixture
def store(tmp_path, tiny_model_dir):
    store = LocalStore(tmp_path / "store")
    registry.publish(store, tiny_model_dir, "tiny", "1")
    return store


@pytest.fixture
def channel(store, tmp_path):
    config = Config(grpc_host="127.0.0.1", grpc_port=0, inline_limit_bytes=16 * 1024)
    env = {"K4D_GENERATOR_CACHE_DIR": str(tmp_path / "cache")}
    server, port = create_server(config, [lambda s, c: register_service(s, c, store=store,
                                                                         env=env)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    channel.close()
    server.stop(0)


def _data(array):
    return common_pb2.TensorData(inline=to_tensor(np.ascontiguousarray(array)))


def _request(make_robot, **sampling):
    image, robot = make_robot()
    return generator_pb2.GenerateRequest(
        image=_data(image), robot_rgb=_data(robot["robot_rgb"]),
        robot_pointmap=_data(robot["robot_pointmap"]), robot_mask=_data(robot["robot_mask"]),
        sampling=generator_pb2.SamplingParams(**sampling), job_id="job-7")


def _health(channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME)).status


def test_gen_grpc_readiness_load_generate_stream(channel, store, make_robot):
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    assert _health(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(_request(make_robot, num_steps=2)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    loaded = stub.LoadModel(generator_pb2.LoadModelRequest(
        model=common_pb2.ModelRef(name="tiny"), backend="torch"))
    assert loaded.model.loaded and loaded.model.name == "tiny" and loaded.model.version == "1"
    assert loaded.model.num_frames == 5 and '"variant": "act"' in loaded.model.config_json
    assert _health(channel) == health_pb2.HealthCheckResponse.SERVING

    responses = list(stub.Generate(_request(make_robot, num_steps=3, seed=11)))
    progress = [r.progress for r in responses if r.WhichOneof("event") == "progress"]
    assert [(p.step, p.total, p.stage) for p in progress] == [(1, 3, "generation"),
                                                              (2, 3, "generation"),
                                                              (3, 3, "generation")]
    result = responses[-1].result
    assert result.seed == 11 and result.metric and result.model.name == "tiny"
    assert result.rgb.WhichOneof("kind") == "ref"  # 23 KiB > the 16 KiB inline limit
    assert result.rgb.ref.uri.endswith("jobs/job-7/generation/rgb")
    rgb = from_tensor_data(result.rgb, store)
    pointmap = from_tensor_data(result.pointmap, store)
    assert rgb.shape == (5, 32, 48, 3) and pointmap.dtype == np.float32


def test_gen_grpc_models_info_and_errors(channel, make_robot):
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    listed = stub.ListModels(generator_pb2.ListModelsRequest()).models
    assert [(m.name, m.version, m.loaded) for m in listed] == [("tiny", "1", False)]
    info = stub.GetModelInfo(generator_pb2.GetModelInfoRequest(
        model=common_pb2.ModelRef(name="tiny"))).model
    assert len(info.manifest_sha256) == 64 and info.uri.endswith("models/tiny/1")
    with pytest.raises(grpc.RpcError) as err:
        stub.GetModelInfo(generator_pb2.GetModelInfoRequest(
            model=common_pb2.ModelRef(name="nope")))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadModel(generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny"),
                                                      backend="tensorrt"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadModel(generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny"),
                                                      backend="tensorrt", precision="fp8"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "fp8 is not supported" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(_request(make_robot, backend="jax")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    static = list(stub.Generate(_request(make_robot, backend="static-world")))
    assert static[-1].result.model.variant == "static-world"
    bad = _request(make_robot, backend="static-world")
    bad.robot_mask.CopyFrom(_data(np.zeros((5, 32, 48), np.uint8)))
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    posed = _request(make_robot, backend="static-world")
    posed.t_cam_from_base.values.extend(np.eye(4).ravel().tolist())
    assert list(stub.Generate(posed))[-1].result.model.variant == "static-world"
    for values in ([1.0] * 9, (2.0 * np.eye(4)).ravel().tolist()):  # 9 values; not rigid
        bad = _request(make_robot, backend="static-world")
        bad.t_cam_from_base.values.extend(values)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Generate(bad))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "t_cam_from_base" in err.value.details()


def _tool(frames: int = 5) -> ToolTrack:
    """The tool rising 1 cm a frame above the base, the gripper closing."""
    poses = np.repeat(np.eye(4)[None], frames, axis=0)
    poses[:, 2, 3] = 0.4 + 0.01 * np.arange(frames)
    return ToolTrack(poses, np.linspace(0.08, 0.0, frames))


def test_gen_grpc_tool_track_reaches_the_model(channel, make_robot, monkeypatch):
    """GenerateRequest.tool (with t_cam_from_base) arrives at
    the loaded model's pipeline as a k4d.tool.ToolTrack, float32 input included."""
    seen = []
    generate = ModelManager.generate

    def recording(self, *args, **kwargs):
        seen.append(kwargs["tool"])
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(ModelManager, "generate", recording)
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    stub.LoadModel(generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny"),
                                                  backend="torch"))
    tool = _tool()
    request = _request(make_robot, num_steps=2)
    request.t_cam_from_base.values.extend(np.eye(4).ravel().tolist())
    request.tool.CopyFrom(tool_to_proto(ToolTrack(tool.T_base_from_tool.astype(np.float32),
                                                  tool.opening)))
    assert list(stub.Generate(request))[-1].result.model.name == "tiny"
    np.testing.assert_allclose(seen[-1].T_base_from_tool, tool.T_base_from_tool, atol=1e-7)
    np.testing.assert_array_equal(seen[-1].opening, tool.opening)
    request.ClearField("tool")
    list(stub.Generate(request))
    assert seen[-1] is None


def _bad_tools():
    """(name, tool message, the field INVALID_ARGUMENT must name): k4d.tool_proto's cases,
    and a track whose frames are not the robot condition's (a request-level check)."""
    return [*bad_tool_messages(_tool()), ("frame count", tool_to_proto(_tool(4)), "tool")]


@pytest.mark.parametrize("name, tool, field", _bad_tools(), ids=[b[0] for b in _bad_tools()])
def test_gen_grpc_bad_tool_track_is_invalid_argument(channel, make_robot, name, tool, field):
    """Checked at the boundary, static-world included (which does not use the tool)."""
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    request = _request(make_robot, backend="static-world")
    request.tool.CopyFrom(tool)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(request))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(err.value)] == [field], err.value.details()


def test_gen_grpc_startup_model_sets_readiness(store, tmp_path, tiny_model_dir):
    """K4D_GENERATOR_MODEL loads in the background; health turns SERVING when it is loaded."""
    import time

    config = Config(grpc_host="127.0.0.1", grpc_port=0)
    env = {"K4D_GENERATOR_MODEL": "registry:tiny/1",
           "K4D_GENERATOR_CACHE_DIR": str(tmp_path / "cache")}
    server, port = create_server(config, [lambda s, c: register_service(s, c, store=store,
                                                                         env=env)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while _health(channel) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "model never became ready"
            time.sleep(0.1)
        stub = generator_pb2_grpc.GeneratorServiceStub(channel)
        info = stub.GetModelInfo(generator_pb2.GetModelInfoRequest(
            model=common_pb2.ModelRef(name="tiny"))).model
        assert info.loaded and info.backend == "torch"
    finally:
        channel.close()
        server.stop(0)


def test_gen_grpc_damaged_model_uri_is_invalid_argument(channel, tmp_path):
    """GetModelInfo / LoadModel on a model directory with unreadable files: the client's
    input, so INVALID_ARGUMENT, not INTERNAL."""
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "k4d_model.json").write_text("{not json")
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    ref = common_pb2.ModelRef(uri=str(damaged))
    for call, request in ((stub.GetModelInfo, generator_pb2.GetModelInfoRequest(model=ref)),
                          (stub.LoadModel, generator_pb2.LoadModelRequest(model=ref))):
        with pytest.raises(grpc.RpcError) as err:
            call(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


class CountingStore(LocalStore):
    """A real LocalStore that counts the requests a caller makes of it."""

    def __init__(self, root):
        super().__init__(root)
        self.reads = 0

    def get_bytes(self, key, expected_sha256=None):
        self.reads += 1
        return super().get_bytes(key, expected_sha256)

    def get_file(self, key, path, expected_sha256=None):
        self.reads += 1
        return super().get_file(key, path, expected_sha256)

    def exists(self, key):
        self.reads += 1
        return super().exists(key)

    def list(self, prefix=""):
        self.reads += 1
        return super().list(prefix)

    def stat(self, key):
        self.reads += 1
        return super().stat(key)


def test_gen_grpc_list_models_reads_the_store_linearly(tmp_path, tiny_model_dir):
    """ListModels costs one listing + two reads per version (it was quadratic: every
    version's description listed the whole registry again)."""
    store = CountingStore(tmp_path / "store")
    config = Config(grpc_host="127.0.0.1", grpc_port=0)
    server, port = create_server(config, [lambda s, c: register_service(
        s, c, store=store, env={"K4D_GENERATOR_CACHE_DIR": str(tmp_path / "cache")})])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    try:
        reads = {}
        for count, (name, version) in enumerate([("tiny", str(v)) for v in range(1, 5)] +
                                                [("other", "a"), ("other", "b")], start=1):
            registry.publish(store, tiny_model_dir, name, version)
            store.reads = 0
            models = stub.ListModels(generator_pb2.ListModelsRequest()).models
            assert len(models) == count
            reads[count] = store.reads
        assert all(reads[n] <= 2 * n + 1 for n in reads), reads
        assert [(m.name, m.version) for m in models] == [
            ("other", "a"), ("other", "b"), ("tiny", "1"), ("tiny", "2"), ("tiny", "3"),
            ("tiny", "4")]
        assert all(len(m.manifest_sha256) == 64 and m.num_frames == 5 for m in models)
    finally:
        channel.close()
        server.stop(0)


@pytest.mark.parametrize("edit, field", [
    ({"extra": {"grasp": "rigdi"}}, "k4d_model.json.extra.grasp"),
    ({"extra": {"grasp_strength": 1.0}}, "k4d_model.json.extra.grasp_strength"),
    ({"num_inference_step": 4}, "k4d_model.json.num_inference_step"),
])
def test_gen_grpc_misspelt_model_option_is_invalid_argument(channel, tiny_model_dir, tmp_path,
                                                            edit, field):
    """LoadModel of a model whose k4d_model.json misspells an option or a value: refused,
    with the field named, instead of loading and running without it."""
    import json
    import shutil

    model = tmp_path / "misspelt"
    shutil.copytree(tiny_model_dir, model)
    meta = json.loads((model / "k4d_model.json").read_text())
    (model / "k4d_model.json").write_text(json.dumps({**meta, **edit}))
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadModel(generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(uri=str(model))))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in [v.field for v in field_violations(err.value)]


def test_grpc_fp8_is_invalid_argument(channel, make_robot):
    stub = generator_pb2_grpc.GeneratorServiceStub(channel)
    stub.LoadModel(generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny"),
                                                  backend="torch"))
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(_request(make_robot, steps=1, quant="fp8")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(err.value)] == ["sampling.quant"]
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Generate(_request(make_robot, solver="dpm")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(err.value)] == ["sampling.solver"]
    ok = list(stub.Generate(_request(make_robot, profile="reference", steps=1)))
    assert ok[-1].HasField("result")
