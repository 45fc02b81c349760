from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorRef(_message.Message):
    __slots__ = ("uri", "sha256", "dtype", "shape", "size_bytes")
    URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    uri: str
    sha256: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    size_bytes: int
    def __init__(self, uri: _Optional[str] = ..., sha256: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class TensorData(_message.Message):
    __slots__ = ("inline", "ref")
    INLINE_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    inline: Tensor
    ref: TensorRef
    def __init__(self, inline: _Optional[_Union[Tensor, _Mapping]] = ..., ref: _Optional[_Union[TensorRef, _Mapping]] = ...) -> None: ...

class Matrix4(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class Pose(_message.Message):
    __slots__ = ("x", "y", "z", "qx", "qy", "qz", "qw")
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    Z_FIELD_NUMBER: _ClassVar[int]
    QX_FIELD_NUMBER: _ClassVar[int]
    QY_FIELD_NUMBER: _ClassVar[int]
    QZ_FIELD_NUMBER: _ClassVar[int]
    QW_FIELD_NUMBER: _ClassVar[int]
    x: float
    y: float
    z: float
    qx: float
    qy: float
    qz: float
    qw: float
    def __init__(self, x: _Optional[float] = ..., y: _Optional[float] = ..., z: _Optional[float] = ..., qx: _Optional[float] = ..., qy: _Optional[float] = ..., qz: _Optional[float] = ..., qw: _Optional[float] = ...) -> None: ...

class CameraIntrinsics(_message.Message):
    __slots__ = ("width", "height", "fx", "fy", "cx", "cy", "distortion")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    FX_FIELD_NUMBER: _ClassVar[int]
    FY_FIELD_NUMBER: _ClassVar[int]
    CX_FIELD_NUMBER: _ClassVar[int]
    CY_FIELD_NUMBER: _ClassVar[int]
    DISTORTION_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., fx: _Optional[float] = ..., fy: _Optional[float] = ..., cx: _Optional[float] = ..., cy: _Optional[float] = ..., distortion: _Optional[_Iterable[float]] = ...) -> None: ...

class CameraModel(_message.Message):
    __slots__ = ("intrinsics", "t_cam_from_world", "t_world_from_base")
    INTRINSICS_FIELD_NUMBER: _ClassVar[int]
    T_CAM_FROM_WORLD_FIELD_NUMBER: _ClassVar[int]
    T_WORLD_FROM_BASE_FIELD_NUMBER: _ClassVar[int]
    intrinsics: CameraIntrinsics
    t_cam_from_world: Matrix4
    t_world_from_base: Matrix4
    def __init__(self, intrinsics: _Optional[_Union[CameraIntrinsics, _Mapping]] = ..., t_cam_from_world: _Optional[_Union[Matrix4, _Mapping]] = ..., t_world_from_base: _Optional[_Union[Matrix4, _Mapping]] = ...) -> None: ...

class RobotRef(_message.Message):
    __slots__ = ("name", "bundle_uri")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_URI_FIELD_NUMBER: _ClassVar[int]
    name: str
    bundle_uri: str
    def __init__(self, name: _Optional[str] = ..., bundle_uri: _Optional[str] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("name", "version", "uri")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    uri: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., uri: _Optional[str] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("stage", "step", "total", "message")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    stage: str
    step: int
    total: int
    message: str
    def __init__(self, stage: _Optional[str] = ..., step: _Optional[int] = ..., total: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("code", "message", "stage", "violations")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    stage: str
    violations: _containers.RepeatedCompositeFieldContainer[FieldViolation]
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., stage: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[FieldViolation, _Mapping]]] = ...) -> None: ...

class FieldViolation(_message.Message):
    __slots__ = ("field", "description")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    field: str
    description: str
    def __init__(self, field: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...
