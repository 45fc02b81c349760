from kinema4d.v1 import common_pb2 as _common_pb2
from kinema4d.v1 import kinematics_pb2 as _kinematics_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Observation(_message.Message):
    __slots__ = ("rgb", "pointmap", "joint_positions", "step")
    RGB_FIELD_NUMBER: _ClassVar[int]
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    JOINT_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    rgb: _common_pb2.Tensor
    pointmap: _common_pb2.Tensor
    joint_positions: _containers.RepeatedScalarFieldContainer[float]
    step: int
    def __init__(self, rgb: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., pointmap: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., joint_positions: _Optional[_Iterable[float]] = ..., step: _Optional[int] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("episode_id", "task", "task_kind", "robot", "joint_names", "camera", "dt_s", "chunk_length", "horizon", "observation", "seed")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TASK_KIND_FIELD_NUMBER: _ClassVar[int]
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    JOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    CAMERA_FIELD_NUMBER: _ClassVar[int]
    DT_S_FIELD_NUMBER: _ClassVar[int]
    CHUNK_LENGTH_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    task: str
    task_kind: str
    robot: _common_pb2.RobotRef
    joint_names: _containers.RepeatedScalarFieldContainer[str]
    camera: _common_pb2.CameraModel
    dt_s: float
    chunk_length: int
    horizon: int
    observation: Observation
    seed: int
    def __init__(self, episode_id: _Optional[str] = ..., task: _Optional[str] = ..., task_kind: _Optional[str] = ..., robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ..., joint_names: _Optional[_Iterable[str]] = ..., camera: _Optional[_Union[_common_pb2.CameraModel, _Mapping]] = ..., dt_s: _Optional[float] = ..., chunk_length: _Optional[int] = ..., horizon: _Optional[int] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ..., seed: _Optional[int] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("policy_name",)
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    policy_name: str
    def __init__(self, policy_name: _Optional[str] = ...) -> None: ...

class ActRequest(_message.Message):
    __slots__ = ("episode_id", "observation")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    observation: Observation
    def __init__(self, episode_id: _Optional[str] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class ActResponse(_message.Message):
    __slots__ = ("action_type", "actions")
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    action_type: _kinematics_pb2.ActionType
    actions: _common_pb2.Tensor
    def __init__(self, action_type: _Optional[_Union[_kinematics_pb2.ActionType, str]] = ..., actions: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...
