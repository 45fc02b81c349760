"""ProjectionService: the gRPC servicer (thin: validate, call the cores, map the result).

Domain errors propagate to the runtime's ErrorMappingInterceptor (INVALID_ARGUMENT with
field violations, NOT_FOUND, RESOURCE_EXHAUSTED, ...). Large outputs go to the object
store as TensorRefs under deterministic keys: `jobs/<job_id>/projection/<name>` when the
request names a job, else `projection/<rpc>/<sha256 of the request>/<name>`.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np
from k4d import pointmap_codec
from k4d.camera_proto import camera_from_proto
from k4d.errors import InvalidArgument
from k4d.robots.fk import forward_kinematics
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import RobotRegistry
from k4d.robots.validation import validate_joints
from k4d.store import from_tensor_data, job_key, to_tensor_data, validate_key
from k4d.tensor_io import INLINE_LIMIT_BYTES, to_tensor
from kinema4d.v1 import common_pb2, projection_pb2_grpc
from kinema4d.v1 import projection_pb2 as ppb

from k4d_projection.core import RendererCache
from k4d_projection.renderer import (
    CONDITION_OUTPUTS,
    DEFAULT_MEMORY_BUDGET_BYTES,
    RenderWorkspace,
)

MAX_FRAMES = 10_000
# Elements (not pixels) of one uploaded array, e.g. a pointmap; the memory budget bounds renders.
MAX_UPLOAD_ELEMENTS = 8192 * 8192 * 64
OUTPUT_NAMES = {ppb.RENDER_OUTPUT_DEPTH: "depth", ppb.RENDER_OUTPUT_POINTMAP: "pointmap",
                ppb.RENDER_OUTPUT_MASK: "mask", ppb.RENDER_OUTPUT_LINK_ID: "link_id",
                ppb.RENDER_OUTPUT_NORMALS: "normals", ppb.RENDER_OUTPUT_RGB: "rgb",
                ppb.RENDER_OUTPUT_WORLD_POINTMAP: "pointmap_world"}
RESPONSE_FIELDS = {"pointmap_world": "world_pointmap"}  # core name -> proto field
ENCODING_DTYPES = {ppb.POINTMAP_ENCODING_KINEMA4D_8BIT: "uint8",
                   ppb.POINTMAP_ENCODING_FLOAT16: "float16",
                   ppb.POINTMAP_ENCODING_FLOAT32: "float32"}


class ProjectionServicer(projection_pb2_grpc.ProjectionServiceServicer):
    def __init__(self, store, *, inline_limit_bytes: int = INLINE_LIMIT_BYTES,
                 memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
                 renderers: RendererCache | None = None):
        self.store = store
        self.registry = RobotRegistry(store)
        self.inline_limit_bytes = inline_limit_bytes
        self.memory_budget_bytes = memory_budget_bytes
        self.renderers = renderers or RendererCache()
        # One render at a time: each holds up to the memory budget and uses every core.
        # Its buffers are reused (page-faulting fresh memory costs more than the ray
        # casting); outputs are serialised before the slot is released.
        self._render_slot = threading.Lock()
        self._workspace = RenderWorkspace()

    def RenderRobot(self, request, context):
        model = robot_from_ref(request.robot, self.registry)
        camera = camera_from_proto(request.camera)
        poses = self._poses(request, model)
        outputs = [OUTPUT_NAMES.get(o) for o in request.outputs] or list(CONDITION_OUTPUTS)
        if None in outputs:
            raise InvalidArgument.for_field("outputs", "unspecified or unknown output")
        renderer = self.renderers.get(model, request.geometry == ppb.GEOMETRY_SET_COLLISION)
        with self._render_slot:
            result = renderer.render(poses, camera, outputs=outputs,
                                     memory_budget_bytes=self.memory_budget_bytes,
                                     workspace=self._workspace)
            prefix = self._prefix(request, "render")
            fields = {RESPONSE_FIELDS.get(name, name): self._out(array, prefix, name)
                      for name, array in result.arrays().items()}
        return ppb.RenderRobotResponse(link_names=model.link_names, **fields)

    def EncodePointmap(self, request, context):
        pointmap = self._array(request.pointmap, "pointmap")
        mask = self._array(request.mask, "mask")
        if pointmap.dtype.kind != "f":
            raise InvalidArgument.for_field("pointmap", f"expected float32, got {pointmap.dtype}")
        if mask.dtype != np.bool_:
            raise InvalidArgument.for_field("mask", f"expected bool, got {mask.dtype}")
        percentiles = (request.clip_low_percentile or pointmap_codec.CLIP_PERCENTILES[0],
                       request.clip_high_percentile or pointmap_codec.CLIP_PERCENTILES[1])
        dtype = ENCODING_DTYPES.get(request.encoding)
        if dtype is None:
            raise InvalidArgument.for_field("encoding", "required")
        if dtype == "uint8":
            encoded = pointmap_codec.encode_8bit(pointmap, mask, percentiles=percentiles)
        else:
            encoded = pointmap_codec.encode_lossless(pointmap, mask, dtype=dtype, percentiles=percentiles)
        prefix = self._prefix(request, "encode")
        return ppb.EncodePointmapResponse(encoded=self._out(encoded.values, prefix, "encoded"),
                                          normalization=normalization_to_proto(encoded))

    def DecodePointmap(self, request, context):
        values = self._array(request.encoded, "encoded")
        want = ENCODING_DTYPES.get(request.encoding, values.dtype.name)
        if values.dtype.name != want or want not in ENCODING_DTYPES.values():
            raise InvalidArgument.for_field("encoded", f"dtype {values.dtype.name} does not match "
                                            f"the encoding (expected {want})")
        if values.ndim != 4 or values.shape[-1] != 3:
            raise InvalidArgument.for_field("encoded", f"expected (T, H, W, 3), got "
                                            f"{values.shape}")
        encoded = self._normalization(request.normalization, values)
        pointmap = pointmap_codec.decode(encoded, frame="first_camera")
        return ppb.DecodePointmapResponse(
            pointmap=self._out(pointmap, self._prefix(request, "decode"), "pointmap"))

    # --- helpers ------------------------------------------------------------------
    def _poses(self, request, model) -> np.ndarray:
        has_poses, has_joints = request.HasField("poses"), request.HasField("joints")
        if has_poses == has_joints:
            raise InvalidArgument.for_field("poses", "set exactly one of poses or joints")
        if has_joints:
            joints = from_tensor_data(request.joints, self.store, "joints",
                                      MAX_FRAMES * model.num_joints)
            return forward_kinematics(model, validate_joints(model, joints))
        poses = from_tensor_data(request.poses, self.store, "poses",
                                 MAX_FRAMES * len(model.link_names) * 16)
        if poses.dtype.kind not in "f":
            raise InvalidArgument.for_field("poses", f"expected float64, got {poses.dtype}")
        return poses

    def _normalization(self, msg, values) -> pointmap_codec.EncodedPointmap:
        T = values.shape[0]
        centre = self._array(msg.centers, "normalization.centers", 3 * T)
        scale = self._array(msg.scales, "normalization.scales", T)
        if centre.shape != (T, 3) or scale.shape != (T,):
            raise InvalidArgument.for_field("normalization", f"expected centers ({T}, 3) and "
                                            f"scales ({T},)")
        if msg.HasField("t_cam0_from_cam"):
            T_cam0 = self._array(msg.t_cam0_from_cam, "normalization.t_cam0_from_cam", 16 * T)
        else:
            T_cam0 = np.broadcast_to(np.eye(4), (T, 4, 4)).copy()
        for name, array in (("centers", centre), ("scales", scale), ("t_cam0_from_cam", T_cam0)):
            if not np.all(np.isfinite(array)):
                raise InvalidArgument.for_field(f"normalization.{name}", "must be finite")
        if T_cam0.shape != (T, 4, 4):
            raise InvalidArgument.for_field("normalization.t_cam0_from_cam",
                                            f"expected ({T}, 4, 4)")
        if np.any(scale <= 0):
            raise InvalidArgument.for_field("normalization.scales", "must be positive")
        return pointmap_codec.EncodedPointmap(values, centre.astype(np.float64),
                                      scale.astype(np.float64),
                                      pointmap_codec.mask_from_values(values), T_cam0.astype(np.float64))

    def _array(self, msg, field: str, max_elements: int = MAX_UPLOAD_ELEMENTS) -> np.ndarray:
        return from_tensor_data(msg, self.store, field, max_elements)

    def _prefix(self, request, rpc: str) -> str:
        """Key prefix of this request's outputs (deterministic: retries rewrite the same)."""
        job_id = getattr(request, "job_id", "")
        if job_id:
            validate_key(f"jobs/{job_id}", "job_id")
            return job_key(job_id, "projection", "out")[: -len("out")]
        digest = hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()[:32]
        return f"projection/{rpc}/{digest}/"

    def _out(self, array: np.ndarray, prefix: str, name: str):
        return to_tensor_data(np.ascontiguousarray(array), self.store, prefix + name,
                              self.inline_limit_bytes)


# --- proto -> core (shared with the worker) ----------------------------------------------
def normalization_to_proto(encoded: pointmap_codec.EncodedPointmap) -> ppb.PointmapNormalization:
    return ppb.PointmapNormalization(
        centers=common_pb2.TensorData(inline=to_tensor(encoded.centre.astype(np.float64))),
        scales=common_pb2.TensorData(inline=to_tensor(encoded.scale.astype(np.float64))),
        t_cam0_from_cam=common_pb2.TensorData(
            inline=to_tensor(encoded.T_cam0_from_cam.astype(np.float64))))
