import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kinema4d.v1 import common_pb2 as _common_pb2
from kinema4d.v1 import generator_pb2 as _generator_pb2
from kinema4d.v1 import simulator_pb2 as _simulator_pb2
from kinema4d.v1 import trainer_pb2 as _trainer_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventHeader(_message.Message):
    __slots__ = ("job_id", "stage", "attempt", "created_at", "traceparent", "owner")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    stage: str
    attempt: int
    created_at: _timestamp_pb2.Timestamp
    traceparent: str
    owner: str
    def __init__(self, job_id: _Optional[str] = ..., stage: _Optional[str] = ..., attempt: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., traceparent: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class SimulationRequested(_message.Message):
    __slots__ = ("header", "spec")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    spec: _simulator_pb2.SimulationSpec
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., spec: _Optional[_Union[_simulator_pb2.SimulationSpec, _Mapping]] = ...) -> None: ...

class KinematicsCompleted(_message.Message):
    __slots__ = ("header", "spec", "joint_names", "link_names", "joints", "poses", "failed_frames", "seconds")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    JOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    LINK_NAMES_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    POSES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FRAMES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    spec: _simulator_pb2.SimulationSpec
    joint_names: _containers.RepeatedScalarFieldContainer[str]
    link_names: _containers.RepeatedScalarFieldContainer[str]
    joints: _common_pb2.TensorRef
    poses: _common_pb2.TensorRef
    failed_frames: int
    seconds: float
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., spec: _Optional[_Union[_simulator_pb2.SimulationSpec, _Mapping]] = ..., joint_names: _Optional[_Iterable[str]] = ..., link_names: _Optional[_Iterable[str]] = ..., joints: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., poses: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., failed_frames: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class ProjectionCompleted(_message.Message):
    __slots__ = ("header", "spec", "joints", "poses", "depth", "pointmap", "mask", "link_id", "rgb", "stage_seconds")
    class StageSecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    POSES_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    LINK_ID_FIELD_NUMBER: _ClassVar[int]
    RGB_FIELD_NUMBER: _ClassVar[int]
    STAGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    spec: _simulator_pb2.SimulationSpec
    joints: _common_pb2.TensorRef
    poses: _common_pb2.TensorRef
    depth: _common_pb2.TensorRef
    pointmap: _common_pb2.TensorRef
    mask: _common_pb2.TensorRef
    link_id: _common_pb2.TensorRef
    rgb: _common_pb2.TensorRef
    stage_seconds: _containers.ScalarMap[str, float]
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., spec: _Optional[_Union[_simulator_pb2.SimulationSpec, _Mapping]] = ..., joints: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., poses: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., depth: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., pointmap: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., mask: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., link_id: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., rgb: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., stage_seconds: _Optional[_Mapping[str, float]] = ...) -> None: ...

class SimulationCompleted(_message.Message):
    __slots__ = ("header", "result")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    result: _simulator_pb2.SimulationResult
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., result: _Optional[_Union[_simulator_pb2.SimulationResult, _Mapping]] = ...) -> None: ...

class SimulationFailed(_message.Message):
    __slots__ = ("header", "error")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    error: _common_pb2.ErrorInfo
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class SimulationProgress(_message.Message):
    __slots__ = ("header", "progress")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    progress: _common_pb2.Progress
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ...) -> None: ...

class TrainingRequested(_message.Message):
    __slots__ = ("header", "spec")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    spec: _trainer_pb2.TrainingJobSpec
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., spec: _Optional[_Union[_trainer_pb2.TrainingJobSpec, _Mapping]] = ...) -> None: ...

class TrainingEvent(_message.Message):
    __slots__ = ("header", "state", "step", "loss", "checkpoint_uri", "error", "total_steps", "published_model", "run_uri")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_MODEL_FIELD_NUMBER: _ClassVar[int]
    RUN_URI_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    state: _trainer_pb2.TrainingState
    step: int
    loss: float
    checkpoint_uri: str
    error: _common_pb2.ErrorInfo
    total_steps: int
    published_model: _common_pb2.ModelRef
    run_uri: str
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., state: _Optional[_Union[_trainer_pb2.TrainingState, str]] = ..., step: _Optional[int] = ..., loss: _Optional[float] = ..., checkpoint_uri: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., total_steps: _Optional[int] = ..., published_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., run_uri: _Optional[str] = ...) -> None: ...

class ModelPublished(_message.Message):
    __slots__ = ("header", "model")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    header: EventHeader
    model: _generator_pb2.ModelInfo
    def __init__(self, header: _Optional[_Union[EventHeader, _Mapping]] = ..., model: _Optional[_Union[_generator_pb2.ModelInfo, _Mapping]] = ...) -> None: ...
