from kinema4d.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_TYPE_UNSPECIFIED: _ClassVar[ActionType]
    ACTION_TYPE_JOINT_POSITIONS: _ClassVar[ActionType]
    ACTION_TYPE_JOINT_DELTAS: _ClassVar[ActionType]
    ACTION_TYPE_JOINT_VELOCITIES: _ClassVar[ActionType]
    ACTION_TYPE_EE_ABSOLUTE: _ClassVar[ActionType]
    ACTION_TYPE_EE_DELTA: _ClassVar[ActionType]

class ActionFrame(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_FRAME_UNSPECIFIED: _ClassVar[ActionFrame]
    ACTION_FRAME_BASE: _ClassVar[ActionFrame]
    ACTION_FRAME_END_EFFECTOR: _ClassVar[ActionFrame]

class RotationFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROTATION_FORMAT_UNSPECIFIED: _ClassVar[RotationFormat]
    ROTATION_FORMAT_QUATERNION_XYZW: _ClassVar[RotationFormat]
    ROTATION_FORMAT_EULER_XYZ: _ClassVar[RotationFormat]

class IkSolver(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IK_SOLVER_UNSPECIFIED: _ClassVar[IkSolver]
    IK_SOLVER_NATIVE: _ClassVar[IkSolver]
    IK_SOLVER_IKPY: _ClassVar[IkSolver]
ACTION_TYPE_UNSPECIFIED: ActionType
ACTION_TYPE_JOINT_POSITIONS: ActionType
ACTION_TYPE_JOINT_DELTAS: ActionType
ACTION_TYPE_JOINT_VELOCITIES: ActionType
ACTION_TYPE_EE_ABSOLUTE: ActionType
ACTION_TYPE_EE_DELTA: ActionType
ACTION_FRAME_UNSPECIFIED: ActionFrame
ACTION_FRAME_BASE: ActionFrame
ACTION_FRAME_END_EFFECTOR: ActionFrame
ROTATION_FORMAT_UNSPECIFIED: RotationFormat
ROTATION_FORMAT_QUATERNION_XYZW: RotationFormat
ROTATION_FORMAT_EULER_XYZ: RotationFormat
IK_SOLVER_UNSPECIFIED: IkSolver
IK_SOLVER_NATIVE: IkSolver
IK_SOLVER_IKPY: IkSolver

class ActionSequence(_message.Message):
    __slots__ = ("type", "frame", "rotation", "values", "gripper", "dt_s", "preset", "initial_joints", "link")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    ROTATION_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    GRIPPER_FIELD_NUMBER: _ClassVar[int]
    DT_S_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    INITIAL_JOINTS_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    type: ActionType
    frame: ActionFrame
    rotation: RotationFormat
    values: _common_pb2.TensorData
    gripper: _common_pb2.TensorData
    dt_s: float
    preset: str
    initial_joints: _common_pb2.TensorData
    link: str
    def __init__(self, type: _Optional[_Union[ActionType, str]] = ..., frame: _Optional[_Union[ActionFrame, str]] = ..., rotation: _Optional[_Union[RotationFormat, str]] = ..., values: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., gripper: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., dt_s: _Optional[float] = ..., preset: _Optional[str] = ..., initial_joints: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., link: _Optional[str] = ...) -> None: ...

class ListRobotsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRobotsResponse(_message.Message):
    __slots__ = ("robots",)
    ROBOTS_FIELD_NUMBER: _ClassVar[int]
    robots: _containers.RepeatedCompositeFieldContainer[RobotSummary]
    def __init__(self, robots: _Optional[_Iterable[_Union[RobotSummary, _Mapping]]] = ...) -> None: ...

class RobotSummary(_message.Message):
    __slots__ = ("name", "source", "num_joints", "num_links")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NUM_JOINTS_FIELD_NUMBER: _ClassVar[int]
    NUM_LINKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: str
    num_joints: int
    num_links: int
    def __init__(self, name: _Optional[str] = ..., source: _Optional[str] = ..., num_joints: _Optional[int] = ..., num_links: _Optional[int] = ...) -> None: ...

class DescribeRobotRequest(_message.Message):
    __slots__ = ("robot",)
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    robot: _common_pb2.RobotRef
    def __init__(self, robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ...) -> None: ...

class DescribeRobotResponse(_message.Message):
    __slots__ = ("description",)
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    description: RobotDescription
    def __init__(self, description: _Optional[_Union[RobotDescription, _Mapping]] = ...) -> None: ...

class RobotDescription(_message.Message):
    __slots__ = ("name", "joint_names", "lower_limits", "upper_limits", "link_names", "ee_link", "gripper_joints", "mesh_files")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    LOWER_LIMITS_FIELD_NUMBER: _ClassVar[int]
    UPPER_LIMITS_FIELD_NUMBER: _ClassVar[int]
    LINK_NAMES_FIELD_NUMBER: _ClassVar[int]
    EE_LINK_FIELD_NUMBER: _ClassVar[int]
    GRIPPER_JOINTS_FIELD_NUMBER: _ClassVar[int]
    MESH_FILES_FIELD_NUMBER: _ClassVar[int]
    name: str
    joint_names: _containers.RepeatedScalarFieldContainer[str]
    lower_limits: _containers.RepeatedScalarFieldContainer[float]
    upper_limits: _containers.RepeatedScalarFieldContainer[float]
    link_names: _containers.RepeatedScalarFieldContainer[str]
    ee_link: str
    gripper_joints: _containers.RepeatedScalarFieldContainer[str]
    mesh_files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., joint_names: _Optional[_Iterable[str]] = ..., lower_limits: _Optional[_Iterable[float]] = ..., upper_limits: _Optional[_Iterable[float]] = ..., link_names: _Optional[_Iterable[str]] = ..., ee_link: _Optional[str] = ..., gripper_joints: _Optional[_Iterable[str]] = ..., mesh_files: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterRobotRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: RegisterRobotHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[RegisterRobotHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class RegisterRobotHeader(_message.Message):
    __slots__ = ("name", "urdf_path", "format", "ee_link")
    NAME_FIELD_NUMBER: _ClassVar[int]
    URDF_PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    EE_LINK_FIELD_NUMBER: _ClassVar[int]
    name: str
    urdf_path: str
    format: str
    ee_link: str
    def __init__(self, name: _Optional[str] = ..., urdf_path: _Optional[str] = ..., format: _Optional[str] = ..., ee_link: _Optional[str] = ...) -> None: ...

class RegisterRobotResponse(_message.Message):
    __slots__ = ("description", "bundle_uri", "sha256")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    description: RobotDescription
    bundle_uri: str
    sha256: str
    def __init__(self, description: _Optional[_Union[RobotDescription, _Mapping]] = ..., bundle_uri: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class ForwardKinematicsRequest(_message.Message):
    __slots__ = ("robot", "joints", "clip_to_limits")
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    CLIP_TO_LIMITS_FIELD_NUMBER: _ClassVar[int]
    robot: _common_pb2.RobotRef
    joints: _common_pb2.TensorData
    clip_to_limits: bool
    def __init__(self, robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ..., joints: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., clip_to_limits: _Optional[bool] = ...) -> None: ...

class ForwardKinematicsResponse(_message.Message):
    __slots__ = ("link_names", "poses")
    LINK_NAMES_FIELD_NUMBER: _ClassVar[int]
    POSES_FIELD_NUMBER: _ClassVar[int]
    link_names: _containers.RepeatedScalarFieldContainer[str]
    poses: _common_pb2.TensorData
    def __init__(self, link_names: _Optional[_Iterable[str]] = ..., poses: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ...) -> None: ...

class InverseKinematicsRequest(_message.Message):
    __slots__ = ("robot", "targets", "link", "seed", "solver", "position_tolerance_m", "rotation_tolerance_rad", "trajectory")
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    POSITION_TOLERANCE_M_FIELD_NUMBER: _ClassVar[int]
    ROTATION_TOLERANCE_RAD_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    robot: _common_pb2.RobotRef
    targets: _common_pb2.TensorData
    link: str
    seed: _common_pb2.TensorData
    solver: IkSolver
    position_tolerance_m: float
    rotation_tolerance_rad: float
    trajectory: bool
    def __init__(self, robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ..., targets: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., link: _Optional[str] = ..., seed: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., solver: _Optional[_Union[IkSolver, str]] = ..., position_tolerance_m: _Optional[float] = ..., rotation_tolerance_rad: _Optional[float] = ..., trajectory: _Optional[bool] = ...) -> None: ...

class InverseKinematicsResponse(_message.Message):
    __slots__ = ("joints", "success", "position_error_m", "rotation_error_rad")
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    POSITION_ERROR_M_FIELD_NUMBER: _ClassVar[int]
    ROTATION_ERROR_RAD_FIELD_NUMBER: _ClassVar[int]
    joints: _common_pb2.TensorData
    success: _containers.RepeatedScalarFieldContainer[bool]
    position_error_m: _containers.RepeatedScalarFieldContainer[float]
    rotation_error_rad: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, joints: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., success: _Optional[_Iterable[bool]] = ..., position_error_m: _Optional[_Iterable[float]] = ..., rotation_error_rad: _Optional[_Iterable[float]] = ...) -> None: ...

class SolveTrajectoryRequest(_message.Message):
    __slots__ = ("robot", "actions", "num_frames", "clip_to_limits")
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    CLIP_TO_LIMITS_FIELD_NUMBER: _ClassVar[int]
    robot: _common_pb2.RobotRef
    actions: ActionSequence
    num_frames: int
    clip_to_limits: bool
    def __init__(self, robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ..., actions: _Optional[_Union[ActionSequence, _Mapping]] = ..., num_frames: _Optional[int] = ..., clip_to_limits: _Optional[bool] = ...) -> None: ...

class SolveTrajectoryResponse(_message.Message):
    __slots__ = ("joint_names", "link_names", "joints", "poses", "success", "position_error_m", "rotation_error_rad")
    JOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    LINK_NAMES_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    POSES_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    POSITION_ERROR_M_FIELD_NUMBER: _ClassVar[int]
    ROTATION_ERROR_RAD_FIELD_NUMBER: _ClassVar[int]
    joint_names: _containers.RepeatedScalarFieldContainer[str]
    link_names: _containers.RepeatedScalarFieldContainer[str]
    joints: _common_pb2.TensorData
    poses: _common_pb2.TensorData
    success: _containers.RepeatedScalarFieldContainer[bool]
    position_error_m: _containers.RepeatedScalarFieldContainer[float]
    rotation_error_rad: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, joint_names: _Optional[_Iterable[str]] = ..., link_names: _Optional[_Iterable[str]] = ..., joints: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., poses: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., success: _Optional[_Iterable[bool]] = ..., position_error_m: _Optional[_Iterable[float]] = ..., rotation_error_rad: _Optional[_Iterable[float]] = ...) -> None: ...
