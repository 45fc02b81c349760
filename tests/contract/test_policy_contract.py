"""The PolicyService contract (proto/kinema4d/v1/policy.proto): golden messages and names.

The golden files hold the wire bytes of one canonical message of each kind, written when
the contract was made. A renumbered field, a changed type or a dropped field changes the
bytes or fails to parse them back, so a policy server built against an older stub keeps
talking to us. (buf breaking against proto/baseline guards the same from the .proto side;
test_proto_contracts.py runs it over every file.) Rewrite the files only for a deliberate
new contract version: K4D_WRITE_GOLDEN=1 pytest tests/contract/test_policy_contract.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from k4d.settings import current as current_settings

GOLDEN = Path(__file__).parent / "golden"


def _tensor(array):
    from kinema4d.v1 import common_pb2

    array = np.ascontiguousarray(array)
    return common_pb2.Tensor(dtype=str(array.dtype), shape=list(array.shape),
                             data=array.astype(array.dtype.newbyteorder("<")).tobytes())


def _messages():
    from kinema4d.v1 import common_pb2, kinematics_pb2, policy_pb2

    obs = policy_pb2.Observation(
        rgb=_tensor(np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)),
        pointmap=_tensor(np.linspace(0, 1, 18, dtype=np.float32).reshape(2, 3, 3)),
        joint_positions=[0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04], step=6)
    camera = common_pb2.CameraModel(
        intrinsics=common_pb2.CameraIntrinsics(width=3, height=2, fx=2.0, fy=2.0, cx=1.0, cy=0.5),
        t_cam_from_world=common_pb2.Matrix4(values=np.eye(4).ravel().tolist()))
    return {
        "policy_reset_request": policy_pb2.ResetRequest(
            episode_id="expert/pick/s007000", task="pick up the red cube and place it on the blue marker",
            task_kind="pick", robot=common_pb2.RobotRef(name="panda"),
            joint_names=[f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"],
            camera=camera, dt_s=0.5, chunk_length=6, horizon=12, observation=obs, seed=7000),
        "policy_reset_response": policy_pb2.ResetResponse(policy_name="expert"),
        "policy_act_request": policy_pb2.ActRequest(episode_id="expert/pick/s007000", observation=obs),
        "policy_act_response": policy_pb2.ActResponse(
            action_type=kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS,
            actions=_tensor(np.full((6, 8), 0.25))),
    }


@pytest.mark.parametrize("name", sorted(_messages()))
def test_golden_message_bytes(name):
    message = _messages()[name]
    data = message.SerializeToString(deterministic=True)
    path = GOLDEN / f"{name}.binpb"
    if current_settings().dev.write_golden:
        path.write_bytes(data)
    golden = path.read_bytes()
    assert data == golden, f"{name}: wire bytes changed against {path} (a breaking contract change?)"
    parsed = type(message).FromString(golden)
    assert parsed == message


def test_policy_service_names_and_methods():
    from kinema4d.v1 import policy_pb2, policy_pb2_grpc

    service = policy_pb2.DESCRIPTOR.services_by_name["PolicyService"]
    assert service.full_name == "kinema4d.v1.PolicyService"
    assert {m.name: (m.input_type.name, m.output_type.name) for m in service.methods} == {
        "Reset": ("ResetRequest", "ResetResponse"), "Act": ("ActRequest", "ActResponse")}
    assert hasattr(policy_pb2_grpc, "PolicyServiceServicer")
