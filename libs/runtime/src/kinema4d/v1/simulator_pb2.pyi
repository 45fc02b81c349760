import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kinema4d.v1 import common_pb2 as _common_pb2
from kinema4d.v1 import generator_pb2 as _generator_pb2
from kinema4d.v1 import kinematics_pb2 as _kinematics_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState

class SimulationSpec(_message.Message):
    __slots__ = ("robot", "actions", "camera", "initial_image", "model", "sampling", "num_frames", "clip_to_limits", "initial_depth")
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    CAMERA_FIELD_NUMBER: _ClassVar[int]
    INITIAL_IMAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    CLIP_TO_LIMITS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_DEPTH_FIELD_NUMBER: _ClassVar[int]
    robot: _common_pb2.RobotRef
    actions: _kinematics_pb2.ActionSequence
    camera: _common_pb2.CameraModel
    initial_image: _common_pb2.TensorData
    model: _common_pb2.ModelRef
    sampling: _generator_pb2.SamplingParams
    num_frames: int
    clip_to_limits: bool
    initial_depth: _common_pb2.TensorData
    def __init__(self, robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ..., actions: _Optional[_Union[_kinematics_pb2.ActionSequence, _Mapping]] = ..., camera: _Optional[_Union[_common_pb2.CameraModel, _Mapping]] = ..., initial_image: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., sampling: _Optional[_Union[_generator_pb2.SamplingParams, _Mapping]] = ..., num_frames: _Optional[int] = ..., clip_to_limits: _Optional[bool] = ..., initial_depth: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ...) -> None: ...

class SimulationResult(_message.Message):
    __slots__ = ("rgb", "pointmap", "robot_pointmap", "robot_mask", "robot_rgb", "joints", "poses", "rgb_video_uri", "model", "stage_seconds", "presigned_urls", "stages")
    class StageSecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class PresignedUrlsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RGB_FIELD_NUMBER: _ClassVar[int]
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    ROBOT_POINTMAP_FIELD_NUMBER: _ClassVar[int]
    ROBOT_MASK_FIELD_NUMBER: _ClassVar[int]
    ROBOT_RGB_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    POSES_FIELD_NUMBER: _ClassVar[int]
    RGB_VIDEO_URI_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STAGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PRESIGNED_URLS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    rgb: _common_pb2.TensorRef
    pointmap: _common_pb2.TensorRef
    robot_pointmap: _common_pb2.TensorRef
    robot_mask: _common_pb2.TensorRef
    robot_rgb: _common_pb2.TensorRef
    joints: _common_pb2.TensorRef
    poses: _common_pb2.TensorRef
    rgb_video_uri: str
    model: _generator_pb2.ModelInfo
    stage_seconds: _containers.ScalarMap[str, float]
    presigned_urls: _containers.ScalarMap[str, str]
    stages: _containers.RepeatedCompositeFieldContainer[StageOutcome]
    def __init__(self, rgb: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., pointmap: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., robot_pointmap: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., robot_mask: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., robot_rgb: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., joints: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., poses: _Optional[_Union[_common_pb2.TensorRef, _Mapping]] = ..., rgb_video_uri: _Optional[str] = ..., model: _Optional[_Union[_generator_pb2.ModelInfo, _Mapping]] = ..., stage_seconds: _Optional[_Mapping[str, float]] = ..., presigned_urls: _Optional[_Mapping[str, str]] = ..., stages: _Optional[_Iterable[_Union[StageOutcome, _Mapping]]] = ...) -> None: ...

class StageOutcome(_message.Message):
    __slots__ = ("stage", "seconds", "failed_frames", "warnings")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FRAMES_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    seconds: float
    failed_frames: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stage: _Optional[str] = ..., seconds: _Optional[float] = ..., failed_frames: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "state", "progress", "result", "error", "created_at", "updated_at", "cancel_requested", "owner")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: JobState
    progress: _common_pb2.Progress
    result: SimulationResult
    error: _common_pb2.ErrorInfo
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    cancel_requested: bool
    owner: str
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., result: _Optional[_Union[SimulationResult, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ..., owner: _Optional[str] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    spec: SimulationSpec
    idempotency_key: str
    def __init__(self, spec: _Optional[_Union[SimulationSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("job_id", "deduplicated")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    deduplicated: bool
    def __init__(self, job_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: JobState
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
