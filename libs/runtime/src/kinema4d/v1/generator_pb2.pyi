from kinema4d.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("num_steps", "guidance_scale", "seed", "scheduler", "shift", "backend", "precision", "profile", "solver", "steps", "cache", "cache_threshold", "quant", "compile")
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_SCALE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    CACHE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    QUANT_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    num_steps: int
    guidance_scale: float
    seed: int
    scheduler: str
    shift: float
    backend: str
    precision: str
    profile: str
    solver: str
    steps: int
    cache: str
    cache_threshold: float
    quant: str
    compile: bool
    def __init__(self, num_steps: _Optional[int] = ..., guidance_scale: _Optional[float] = ..., seed: _Optional[int] = ..., scheduler: _Optional[str] = ..., shift: _Optional[float] = ..., backend: _Optional[str] = ..., precision: _Optional[str] = ..., profile: _Optional[str] = ..., solver: _Optional[str] = ..., steps: _Optional[int] = ..., cache: _Optional[str] = ..., cache_threshold: _Optional[float] = ..., quant: _Optional[str] = ..., compile: _Optional[bool] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "image", "robot_rgb", "robot_pointmap", "robot_mask", "sampling", "job_id", "initial_pointmap", "t_cam_from_base", "tool")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ROBOT_RGB_FIELD_NUMBER: _ClassVar[int]
    ROBOT_POINTMAP_FIELD_NUMBER: _ClassVar[int]
    ROBOT_MASK_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POINTMAP_FIELD_NUMBER: _ClassVar[int]
    T_CAM_FROM_BASE_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    image: _common_pb2.TensorData
    robot_rgb: _common_pb2.TensorData
    robot_pointmap: _common_pb2.TensorData
    robot_mask: _common_pb2.TensorData
    sampling: SamplingParams
    job_id: str
    initial_pointmap: _common_pb2.TensorData
    t_cam_from_base: _common_pb2.Matrix4
    tool: ToolTrack
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., image: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., robot_rgb: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., robot_pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., robot_mask: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., job_id: _Optional[str] = ..., initial_pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., t_cam_from_base: _Optional[_Union[_common_pb2.Matrix4, _Mapping]] = ..., tool: _Optional[_Union[ToolTrack, _Mapping]] = ...) -> None: ...

class ToolTrack(_message.Message):
    __slots__ = ("t_base_from_tool", "opening", "holding")
    T_BASE_FROM_TOOL_FIELD_NUMBER: _ClassVar[int]
    OPENING_FIELD_NUMBER: _ClassVar[int]
    HOLDING_FIELD_NUMBER: _ClassVar[int]
    t_base_from_tool: _common_pb2.TensorData
    opening: _common_pb2.TensorData
    holding: bool
    def __init__(self, t_base_from_tool: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., opening: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., holding: _Optional[bool] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: _common_pb2.Progress
    result: GenerateResult
    def __init__(self, progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., result: _Optional[_Union[GenerateResult, _Mapping]] = ...) -> None: ...

class GenerateResult(_message.Message):
    __slots__ = ("rgb", "pointmap", "metric", "model", "seed", "sampling_seconds")
    RGB_FIELD_NUMBER: _ClassVar[int]
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    rgb: _common_pb2.TensorData
    pointmap: _common_pb2.TensorData
    metric: bool
    model: ModelInfo
    seed: int
    sampling_seconds: float
    def __init__(self, rgb: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., metric: _Optional[bool] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., seed: _Optional[int] = ..., sampling_seconds: _Optional[float] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "version", "variant", "config_json", "loaded", "backend", "precision", "num_frames", "height", "width", "uri", "manifest_sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    variant: str
    config_json: str
    loaded: bool
    backend: str
    precision: str
    num_frames: int
    height: int
    width: int
    uri: str
    manifest_sha256: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., variant: _Optional[str] = ..., config_json: _Optional[str] = ..., loaded: _Optional[bool] = ..., backend: _Optional[str] = ..., precision: _Optional[str] = ..., num_frames: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., uri: _Optional[str] = ..., manifest_sha256: _Optional[str] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("model", "backend", "precision")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    backend: str
    precision: str
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., backend: _Optional[str] = ..., precision: _Optional[str] = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ("model", "load_seconds")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    model: ModelInfo
    load_seconds: float
    def __init__(self, model: _Optional[_Union[ModelInfo, _Mapping]] = ..., load_seconds: _Optional[float] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: ModelInfo
    def __init__(self, model: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...
