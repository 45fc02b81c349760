"""GeneratorService: the gRPC servicer (thin: validate, call `ModelManager`, map results).

Generate streams one `Progress` per sampler step, then the result. Sampling runs in a
worker thread that feeds a queue; a client that goes away cancels it between steps.
Outputs larger than the inline limit go to the object store under
`jobs/<job_id>/generation/<name>` (or `generation/<request sha256>/<name>` without a job).
Domain errors propagate to the runtime's ErrorMappingInterceptor.
"""

from __future__ import annotations

import contextvars
import json
import queue
import threading
import time

from k4d.camera_proto import camera_pose_from_proto
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d.sampling import sampling_layer_from_proto
from k4d.store import from_tensor_data, job_key, to_tensor_data, validate_key
from k4d.tensor_io import sha256_bytes
from k4d.tool_proto import tool_from_proto
from kinema4d.v1 import common_pb2, generator_pb2, generator_pb2_grpc

from k4d_generator.service import ModelManager, model_ref_string

STAGE = "generation"
BACKENDS = ("", "torch", "onnx", "tensorrt", STATIC_WORLD)


def model_info_proto(info: dict) -> generator_pb2.ModelInfo:
    """A ModelInfo message from a model description dict (see `ModelManager.describe`)."""
    return generator_pb2.ModelInfo(
        name=str(info.get("name", "")), version=str(info.get("version", "")),
        variant=str(info.get("variant", "")),
        config_json=json.dumps(info.get("config", {}), sort_keys=True),
        loaded=bool(info.get("loaded", False)), backend=str(info.get("backend", "")),
        precision=str(info.get("precision") or ""), num_frames=int(info.get("num_frames", 0)),
        height=int(info.get("height", 0)), width=int(info.get("width", 0)),
        uri=str(info.get("uri", info.get("source", ""))),
        manifest_sha256=str(info.get("manifest_sha256", "")))


def sampling_kwargs(params: generator_pb2.SamplingParams) -> dict:
    """Zero values mean the model's defaults (proto contract)."""
    if params.backend not in BACKENDS:
        raise InvalidArgument.for_field("sampling.backend", f"must be one of {BACKENDS[1:]}")
    if params.scheduler not in ("", "unipc", "euler"):
        raise InvalidArgument.for_field("sampling.scheduler", "must be unipc or euler")
    if params.guidance_scale < 0 or params.shift < 0:
        raise InvalidArgument.for_field("sampling", "guidance_scale and shift must be >= 0")
    # profile, solver, steps, cache, cache_threshold, quant, compile (num_steps and
    # scheduler are folded into steps and solver)
    options = sampling_layer_from_proto(params, "sampling")
    return {"backend": params.backend, "seed": params.seed or 42,
            "guidance": params.guidance_scale or None, "shift": params.shift or None,
            "options": options}


class GeneratorServicer(generator_pb2_grpc.GeneratorServiceServicer):
    def __init__(self, manager: ModelManager, store=None, inline_limit_bytes: int = 1 << 20):
        self.manager = manager
        self.store = store
        self.inline_limit_bytes = inline_limit_bytes

    # ------------------------------------------------------------ Generate

    def Generate(self, request, context):
        # The cheap checks first: a refused request never reads its tensors from the store.
        kwargs = sampling_kwargs(request.sampling)
        if request.HasField("model") and (request.model.name or request.model.uri):
            self._require_loaded(request.model)
        if request.job_id:
            validate_key(f"jobs/{request.job_id}", "job_id")
        arrays = {name: from_tensor_data(getattr(request, name), self.store, name)
                  for name in ("image", "robot_rgb", "robot_pointmap", "robot_mask")}
        initial = None
        if request.HasField("initial_pointmap") and request.initial_pointmap.WhichOneof("kind"):
            initial = from_tensor_data(request.initial_pointmap, self.store, "initial_pointmap")
        pose = None
        if len(request.t_cam_from_base.values):
            pose = camera_pose_from_proto(request.t_cam_from_base, "t_cam_from_base")
        tool = None
        if request.HasField("tool"):
            mask = arrays["robot_mask"]  # a mask without frames is refused by the generator
            tool = tool_from_proto(request.tool, self.store, "tool",
                                   frames=mask.shape[0] if mask.ndim else None)
        events: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                result = self.manager.generate(
                    arrays["image"], arrays["robot_rgb"], arrays["robot_pointmap"],
                    arrays["robot_mask"], callback=lambda done, total: events.put(
                        ("progress", done, total)),
                    should_cancel=lambda: not context.is_active(),
                    initial_pointmap=initial, T_cam_from_base=pose, tool=tool,
                    **kwargs)
                events.put(("result", result))
            except BaseException as exc:  # re-raised in the RPC thread, mapped there
                events.put(("error", exc))

        started = time.perf_counter()
        # In this RPC's context, so its wait for the sampling lock counts as its queue time.
        threading.Thread(target=contextvars.copy_context().run, args=(run,), name="generate",
                         daemon=True).start()
        while True:
            kind, *payload = events.get()
            if kind == "progress":
                yield generator_pb2.GenerateResponse(progress=common_pb2.Progress(
                    stage=STAGE, step=payload[0], total=payload[1], message="sampling"))
            elif kind == "error":
                raise payload[0]
            else:
                yield generator_pb2.GenerateResponse(
                    result=self._result_proto(request, payload[0],
                                              time.perf_counter() - started))
                return

    def _require_loaded(self, ref: common_pb2.ModelRef) -> None:
        loaded = self.manager.loaded
        wanted = model_ref_string(ref.name, ref.version, ref.uri)
        if loaded is None:
            raise FailedPrecondition("no model is loaded; call LoadModel first")
        if not loaded.matches(ref.name, ref.version, ref.uri):
            raise FailedPrecondition(f"model {wanted} is not the loaded one ({loaded.ref}); "
                                     "call LoadModel first")

    def _result_proto(self, request, result, seconds: float) -> generator_pb2.GenerateResult:
        digest = sha256_bytes(request.SerializeToString())[:32]

        def key(name: str) -> str:
            return job_key(request.job_id, STAGE, name) if request.job_id else \
                f"{STAGE}/{digest}/{name}"

        rgb = to_tensor_data(result.rgb, self.store, key("rgb"), self.inline_limit_bytes)
        pointmap = to_tensor_data(result.pointmap, self.store, key("pointmap"),
                                  self.inline_limit_bytes)
        info = result.metadata.get("model") or {"name": STATIC_WORLD, "variant": STATIC_WORLD}
        info = {**info, "loaded": True,
                "backend": result.metadata.get("backend", {}).get("backend", "")}
        return generator_pb2.GenerateResult(
            rgb=rgb, pointmap=pointmap,
            metric=result.metadata.get("pointmap_units") == "metres",
            model=model_info_proto(info), seed=int(result.metadata.get("seed", 0)),
            sampling_seconds=seconds)

    # ------------------------------------------------------------ models

    def LoadModel(self, request, context):
        if request.backend not in ("", "torch", "onnx", "tensorrt"):
            raise InvalidArgument.for_field("backend", "must be torch, onnx or tensorrt")
        ref = model_ref_string(request.model.name, request.model.version, request.model.uri)
        loaded = self.manager.load(ref, request.backend or "torch", request.precision or None)
        info = self.manager.describe(request.model.name, loaded.info.get("version", ""),
                                     request.model.uri)
        return generator_pb2.LoadModelResponse(model=model_info_proto(info),
                                               load_seconds=loaded.load_seconds)

    def ListModels(self, request, context):
        return generator_pb2.ListModelsResponse(
            models=[model_info_proto(info) for info in self.manager.list_models()])

    def GetModelInfo(self, request, context):
        info = self.manager.describe(request.model.name, request.model.version,
                                     request.model.uri)
        return generator_pb2.GetModelInfoResponse(model=model_info_proto(info))
