import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kinema4d.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrainingState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAINING_STATE_UNSPECIFIED: _ClassVar[TrainingState]
    TRAINING_STATE_QUEUED: _ClassVar[TrainingState]
    TRAINING_STATE_RUNNING: _ClassVar[TrainingState]
    TRAINING_STATE_SUCCEEDED: _ClassVar[TrainingState]
    TRAINING_STATE_FAILED: _ClassVar[TrainingState]
    TRAINING_STATE_CANCELLED: _ClassVar[TrainingState]
TRAINING_STATE_UNSPECIFIED: TrainingState
TRAINING_STATE_QUEUED: TrainingState
TRAINING_STATE_RUNNING: TrainingState
TRAINING_STATE_SUCCEEDED: TrainingState
TRAINING_STATE_FAILED: TrainingState
TRAINING_STATE_CANCELLED: TrainingState

class TrainingJobSpec(_message.Message):
    __slots__ = ("base_model", "dataset_uri", "output_model_name", "variant", "num_steps", "learning_rate", "weight_decay", "lora_rank", "lora_alpha", "world_size", "sharding", "recipe_json", "recipe")
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    DATASET_URI_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LORA_ALPHA_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHARDING_FIELD_NUMBER: _ClassVar[int]
    RECIPE_JSON_FIELD_NUMBER: _ClassVar[int]
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    base_model: _common_pb2.ModelRef
    dataset_uri: str
    output_model_name: str
    variant: str
    num_steps: int
    learning_rate: float
    weight_decay: float
    lora_rank: int
    lora_alpha: float
    world_size: int
    sharding: str
    recipe_json: str
    recipe: str
    def __init__(self, base_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., dataset_uri: _Optional[str] = ..., output_model_name: _Optional[str] = ..., variant: _Optional[str] = ..., num_steps: _Optional[int] = ..., learning_rate: _Optional[float] = ..., weight_decay: _Optional[float] = ..., lora_rank: _Optional[int] = ..., lora_alpha: _Optional[float] = ..., world_size: _Optional[int] = ..., sharding: _Optional[str] = ..., recipe_json: _Optional[str] = ..., recipe: _Optional[str] = ...) -> None: ...

class TrainingJob(_message.Message):
    __slots__ = ("job_id", "spec", "state", "step", "loss", "checkpoint_uri", "published_model", "error", "created_at", "updated_at", "run_uri", "total_steps", "cancel_requested", "launches")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_MODEL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_URI_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: TrainingJobSpec
    state: TrainingState
    step: int
    loss: float
    checkpoint_uri: str
    published_model: _common_pb2.ModelRef
    error: _common_pb2.ErrorInfo
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    run_uri: str
    total_steps: int
    cancel_requested: bool
    launches: int
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[TrainingJobSpec, _Mapping]] = ..., state: _Optional[_Union[TrainingState, str]] = ..., step: _Optional[int] = ..., loss: _Optional[float] = ..., checkpoint_uri: _Optional[str] = ..., published_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_uri: _Optional[str] = ..., total_steps: _Optional[int] = ..., cancel_requested: _Optional[bool] = ..., launches: _Optional[int] = ...) -> None: ...

class SubmitTrainingJobRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    spec: TrainingJobSpec
    idempotency_key: str
    def __init__(self, spec: _Optional[_Union[TrainingJobSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SubmitTrainingJobResponse(_message.Message):
    __slots__ = ("job", "deduplicated")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    job: TrainingJob
    deduplicated: bool
    def __init__(self, job: _Optional[_Union[TrainingJob, _Mapping]] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class GetTrainingJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: TrainingJob
    def __init__(self, job: _Optional[_Union[TrainingJob, _Mapping]] = ...) -> None: ...

class CancelTrainingJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: TrainingJob
    def __init__(self, job: _Optional[_Union[TrainingJob, _Mapping]] = ...) -> None: ...

class ListTrainingJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: TrainingState
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[TrainingState, str]] = ...) -> None: ...

class ListTrainingJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[TrainingJob]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[TrainingJob, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchTrainingJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: TrainingJob
    def __init__(self, job: _Optional[_Union[TrainingJob, _Mapping]] = ...) -> None: ...
