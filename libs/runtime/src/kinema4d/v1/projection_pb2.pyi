from kinema4d.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RenderOutput(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RENDER_OUTPUT_UNSPECIFIED: _ClassVar[RenderOutput]
    RENDER_OUTPUT_DEPTH: _ClassVar[RenderOutput]
    RENDER_OUTPUT_POINTMAP: _ClassVar[RenderOutput]
    RENDER_OUTPUT_MASK: _ClassVar[RenderOutput]
    RENDER_OUTPUT_LINK_ID: _ClassVar[RenderOutput]
    RENDER_OUTPUT_NORMALS: _ClassVar[RenderOutput]
    RENDER_OUTPUT_RGB: _ClassVar[RenderOutput]
    RENDER_OUTPUT_WORLD_POINTMAP: _ClassVar[RenderOutput]

class GeometrySet(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GEOMETRY_SET_UNSPECIFIED: _ClassVar[GeometrySet]
    GEOMETRY_SET_VISUAL: _ClassVar[GeometrySet]
    GEOMETRY_SET_COLLISION: _ClassVar[GeometrySet]

class PointmapEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    POINTMAP_ENCODING_UNSPECIFIED: _ClassVar[PointmapEncoding]
    POINTMAP_ENCODING_KINEMA4D_8BIT: _ClassVar[PointmapEncoding]
    POINTMAP_ENCODING_FLOAT16: _ClassVar[PointmapEncoding]
    POINTMAP_ENCODING_FLOAT32: _ClassVar[PointmapEncoding]
RENDER_OUTPUT_UNSPECIFIED: RenderOutput
RENDER_OUTPUT_DEPTH: RenderOutput
RENDER_OUTPUT_POINTMAP: RenderOutput
RENDER_OUTPUT_MASK: RenderOutput
RENDER_OUTPUT_LINK_ID: RenderOutput
RENDER_OUTPUT_NORMALS: RenderOutput
RENDER_OUTPUT_RGB: RenderOutput
RENDER_OUTPUT_WORLD_POINTMAP: RenderOutput
GEOMETRY_SET_UNSPECIFIED: GeometrySet
GEOMETRY_SET_VISUAL: GeometrySet
GEOMETRY_SET_COLLISION: GeometrySet
POINTMAP_ENCODING_UNSPECIFIED: PointmapEncoding
POINTMAP_ENCODING_KINEMA4D_8BIT: PointmapEncoding
POINTMAP_ENCODING_FLOAT16: PointmapEncoding
POINTMAP_ENCODING_FLOAT32: PointmapEncoding

class RenderRobotRequest(_message.Message):
    __slots__ = ("robot", "poses", "joints", "camera", "outputs", "geometry", "job_id")
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    POSES_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    CAMERA_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    GEOMETRY_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    robot: _common_pb2.RobotRef
    poses: _common_pb2.TensorData
    joints: _common_pb2.TensorData
    camera: _common_pb2.CameraModel
    outputs: _containers.RepeatedScalarFieldContainer[RenderOutput]
    geometry: GeometrySet
    job_id: str
    def __init__(self, robot: _Optional[_Union[_common_pb2.RobotRef, _Mapping]] = ..., poses: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., joints: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., camera: _Optional[_Union[_common_pb2.CameraModel, _Mapping]] = ..., outputs: _Optional[_Iterable[_Union[RenderOutput, str]]] = ..., geometry: _Optional[_Union[GeometrySet, str]] = ..., job_id: _Optional[str] = ...) -> None: ...

class RenderRobotResponse(_message.Message):
    __slots__ = ("link_names", "depth", "pointmap", "mask", "link_id", "normals", "rgb", "world_pointmap")
    LINK_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    LINK_ID_FIELD_NUMBER: _ClassVar[int]
    NORMALS_FIELD_NUMBER: _ClassVar[int]
    RGB_FIELD_NUMBER: _ClassVar[int]
    WORLD_POINTMAP_FIELD_NUMBER: _ClassVar[int]
    link_names: _containers.RepeatedScalarFieldContainer[str]
    depth: _common_pb2.TensorData
    pointmap: _common_pb2.TensorData
    mask: _common_pb2.TensorData
    link_id: _common_pb2.TensorData
    normals: _common_pb2.TensorData
    rgb: _common_pb2.TensorData
    world_pointmap: _common_pb2.TensorData
    def __init__(self, link_names: _Optional[_Iterable[str]] = ..., depth: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., mask: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., link_id: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., normals: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., rgb: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., world_pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ...) -> None: ...

class PointmapNormalization(_message.Message):
    __slots__ = ("centers", "scales", "t_cam0_from_cam")
    CENTERS_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    T_CAM0_FROM_CAM_FIELD_NUMBER: _ClassVar[int]
    centers: _common_pb2.TensorData
    scales: _common_pb2.TensorData
    t_cam0_from_cam: _common_pb2.TensorData
    def __init__(self, centers: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., scales: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., t_cam0_from_cam: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ...) -> None: ...

class EncodePointmapRequest(_message.Message):
    __slots__ = ("pointmap", "mask", "encoding", "clip_low_percentile", "clip_high_percentile")
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    CLIP_LOW_PERCENTILE_FIELD_NUMBER: _ClassVar[int]
    CLIP_HIGH_PERCENTILE_FIELD_NUMBER: _ClassVar[int]
    pointmap: _common_pb2.TensorData
    mask: _common_pb2.TensorData
    encoding: PointmapEncoding
    clip_low_percentile: float
    clip_high_percentile: float
    def __init__(self, pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., mask: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., encoding: _Optional[_Union[PointmapEncoding, str]] = ..., clip_low_percentile: _Optional[float] = ..., clip_high_percentile: _Optional[float] = ...) -> None: ...

class EncodePointmapResponse(_message.Message):
    __slots__ = ("encoded", "normalization")
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    encoded: _common_pb2.TensorData
    normalization: PointmapNormalization
    def __init__(self, encoded: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., normalization: _Optional[_Union[PointmapNormalization, _Mapping]] = ...) -> None: ...

class DecodePointmapRequest(_message.Message):
    __slots__ = ("encoded", "normalization", "encoding")
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    encoded: _common_pb2.TensorData
    normalization: PointmapNormalization
    encoding: PointmapEncoding
    def __init__(self, encoded: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ..., normalization: _Optional[_Union[PointmapNormalization, _Mapping]] = ..., encoding: _Optional[_Union[PointmapEncoding, str]] = ...) -> None: ...

class DecodePointmapResponse(_message.Message):
    __slots__ = ("pointmap",)
    POINTMAP_FIELD_NUMBER: _ClassVar[int]
    pointmap: _common_pb2.TensorData
    def __init__(self, pointmap: _Optional[_Union[_common_pb2.TensorData, _Mapping]] = ...) -> None: ...
