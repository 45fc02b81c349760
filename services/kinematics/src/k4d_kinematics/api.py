"""KinematicsService: the gRPC servicer (thin: validate, call the cores, map the result).

Domain errors propagate to the runtime's ErrorMappingInterceptor (INVALID_ARGUMENT with
field violations, NOT_FOUND, ...). Large result arrays go to the object store as
TensorRefs under deterministic keys `kinematics/<rpc>/<sha256 of the request>/...`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import numpy as np
from k4d.action_proto import action_spec_from_proto
from k4d.actions import ActionSpec
from k4d.errors import InvalidArgument
from k4d.robots.bundles import BundleLimits
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.robots.loader import BUILTIN_ROBOTS
from k4d.robots.proto import robot_from_ref
from k4d.robots.registry import PREFIX, RobotRegistry
from k4d.robots.validation import validate_joints, validate_seed, validate_targets
from k4d.store import from_tensor_data, to_tensor_data
from k4d.tensor_io import INLINE_LIMIT_BYTES
from kinema4d.v1 import kinematics_pb2 as kpb
from kinema4d.v1 import kinematics_pb2_grpc

from .core import solve_trajectory
from .ik import solve_ik
from .proto_actions import ik_options

MAX_FRAMES = 100_000  # FK frames per request
MAX_IK_FRAMES = 10_000
MAX_UPLOAD_BYTES = 256 * 1024 * 1024

SOLVERS = {kpb.IK_SOLVER_UNSPECIFIED: "ours", kpb.IK_SOLVER_NATIVE: "ours",
           kpb.IK_SOLVER_IKPY: "ikpy"}


class KinematicsServicer(kinematics_pb2_grpc.KinematicsServiceServicer):
    def __init__(self, store, *, inline_limit_bytes: int = INLINE_LIMIT_BYTES,
                 cache_dir: str | None = None, bundle_limits: BundleLimits = BundleLimits()):
        self.store = store
        self.registry = RobotRegistry(store, cache_dir=cache_dir, limits=bundle_limits)
        self.inline_limit_bytes = inline_limit_bytes

    # --- robots -------------------------------------------------------------------

    def ListRobots(self, request, context):
        robots = []
        for name in BUILTIN_ROBOTS:
            model = load_robot(name)
            robots.append(kpb.RobotSummary(name=name, source="builtin", num_joints=model.num_joints,
                                           num_links=len(model.link_names)))
        for name in self.registry.names():
            robots.append(kpb.RobotSummary(name=name, source="registered"))
        return kpb.ListRobotsResponse(robots=robots)

    def DescribeRobot(self, request, context):
        return kpb.DescribeRobotResponse(description=describe(self._robot(request.robot)))

    def RegisterRobot(self, request_iterator, context):
        header, path, sha = None, None, hashlib.sha256()
        try:
            with tempfile.NamedTemporaryFile(suffix=".bundle", delete=False) as handle:
                path, size = handle.name, 0
                for message in request_iterator:
                    part = message.WhichOneof("part")
                    if header is None:
                        if part != "header":
                            raise InvalidArgument.for_field("header", "the first message must be "
                                                            "the header")
                        header = message.header
                        continue
                    if part != "chunk":
                        raise InvalidArgument.for_field("header", "only one header is allowed")
                    size += len(message.chunk)
                    if size > MAX_UPLOAD_BYTES:
                        raise InvalidArgument.for_field("chunk", f"bundle larger than "
                                                        f"{MAX_UPLOAD_BYTES} bytes")
                    handle.write(message.chunk)
                    sha.update(message.chunk)
            if header is None:
                raise InvalidArgument.for_field("header", "missing")
            if header.format not in ("", "zip", "tar"):
                raise InvalidArgument.for_field("header.format", "expected 'zip' or 'tar'")
            if size == 0:
                raise InvalidArgument.for_field("chunk", "empty bundle")
            model = self.registry.register(path, name=header.name or None,
                                           urdf_path=header.urdf_path or None,
                                           ee_link=header.ee_link or None)
        finally:
            if path:
                os.unlink(path)
        return kpb.RegisterRobotResponse(
            description=describe(model), sha256=sha.hexdigest(),
            bundle_uri=self.store.uri_for(f"{PREFIX}{model.name}/bundle"))

    # --- kinematics -----------------------------------------------------------------

    def ForwardKinematics(self, request, context):
        model = self._robot(request.robot)
        joints = self._array(request.joints, "joints", MAX_FRAMES * model.num_joints)
        joints = validate_joints(model, joints, clip=request.clip_to_limits)
        poses = forward_kinematics(model, joints)
        key = _request_key("fk", request)
        return kpb.ForwardKinematicsResponse(link_names=model.link_names,
                                             poses=self._out(poses, f"{key}/poses"))

    def InverseKinematics(self, request, context):
        model = self._robot(request.robot)
        targets = validate_targets(self._array(request.targets, "targets", MAX_IK_FRAMES * 16))
        if len(targets) > MAX_IK_FRAMES:
            raise InvalidArgument.for_field("targets", f"at most {MAX_IK_FRAMES} frames")
        seed = None
        if request.HasField("seed"):
            seed = validate_seed(model, self._array(request.seed, "seed", 10_000))
        solver = SOLVERS.get(request.solver)
        if solver is None:  # proto3 enums are open: any number arrives
            raise InvalidArgument.for_field("solver", f"unknown IK solver {request.solver}")
        options = ik_options(request, len(targets))
        result = solve_ik(model, targets, link=request.link or None, seed=seed,
                          mode="trajectory" if request.trajectory else "independent",
                          solver=solver, options=options)
        key = _request_key("ik", request)
        return kpb.InverseKinematicsResponse(
            joints=self._out(result.joints, f"{key}/joints"), success=result.success.tolist(),
            position_error_m=result.position_error.tolist(),
            rotation_error_rad=result.rotation_error.tolist())

    def SolveTrajectory(self, request, context):
        model = self._robot(request.robot)
        spec = self._action_spec(request)
        result = solve_trajectory(model, spec)
        key = _request_key("trajectory", request)
        return kpb.SolveTrajectoryResponse(
            joint_names=model.joint_names, link_names=model.link_names,
            joints=self._out(result.joints, f"{key}/joints"),
            poses=self._out(result.poses, f"{key}/poses"), success=result.success.tolist(),
            position_error_m=result.position_error.tolist(),
            rotation_error_rad=result.rotation_error.tolist())

    # --- helpers ------------------------------------------------------------------

    def _robot(self, ref):
        return robot_from_ref(ref, self.registry)

    def _array(self, msg, field: str, max_elements: int) -> np.ndarray:
        return from_tensor_data(msg, self.store, field, max_elements)

    def _out(self, array: np.ndarray, key: str):
        return to_tensor_data(np.ascontiguousarray(array), self.store, key, self.inline_limit_bytes)

    def _action_spec(self, request) -> ActionSpec:
        return action_spec_from_proto(request.actions, request.num_frames, request.clip_to_limits,
                                      self._array)


def describe(model) -> kpb.RobotDescription:
    return kpb.RobotDescription(
        name=model.name, joint_names=model.joint_names, lower_limits=model.lower.tolist(),
        upper_limits=model.upper.tolist(), link_names=model.link_names, ee_link=model.ee_link,
        gripper_joints=model.gripper_joints, mesh_files=model.mesh_files)


def _request_key(rpc: str, request) -> str:
    digest = hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()[:32]
    return f"kinematics/{rpc}/{digest}"
