"""k4d.tool_proto: the ToolTrack proto <-> k4d.tool.ToolTrack, errors named by proto path."""

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d.store import LocalStore, to_tensor_data
from k4d.testing.tool_tracks import bad_tool_messages
from k4d.tool import ToolTrack
from k4d.tool_proto import tool_from_proto, tool_to_proto
from kinema4d.v1 import generator_pb2


def track(frames=4):
    poses = np.repeat(np.eye(4)[None], frames, axis=0)
    poses[:, :3, 3] = np.linspace([0.3, 0.0, 0.5], [0.4, 0.1, 0.3], frames)
    return ToolTrack(poses, np.linspace(0.08, 0.0, frames))


def message(poses, opening):
    return generator_pb2.ToolTrack(t_base_from_tool=to_tensor_data(np.asarray(poses)),
                                   opening=to_tensor_data(np.asarray(opening)))


def field_of(call):
    with pytest.raises(InvalidArgument) as err:
        call()
    return [v.field for v in err.value.violations]


def test_round_trip_float64_and_float32():
    tool = track()
    back = tool_from_proto(tool_to_proto(tool), frames=4)
    np.testing.assert_array_equal(back.T_base_from_tool, tool.T_base_from_tool)
    np.testing.assert_array_equal(back.opening, tool.opening)
    assert back.holding is False
    held = ToolTrack(tool.T_base_from_tool, tool.opening, holding=True)
    assert tool_from_proto(tool_to_proto(held)).holding is True
    single = tool_from_proto(message(tool.T_base_from_tool.astype(np.float32),
                                     tool.opening.astype(np.float32)))
    assert single.T_base_from_tool.dtype == np.float64 and single.frames == 4


def test_refs_are_read_through_the_store(tmp_path):
    store = LocalStore(tmp_path)
    tool = track()
    msg = generator_pb2.ToolTrack(
        t_base_from_tool=to_tensor_data(tool.T_base_from_tool, store, "t/poses", 0),
        opening=to_tensor_data(tool.opening, store, "t/opening", 0))
    assert msg.t_base_from_tool.WhichOneof("kind") == "ref"
    np.testing.assert_array_equal(tool_from_proto(msg, store).opening, tool.opening)
    assert field_of(lambda: tool_from_proto(msg)) == ["tool.t_base_from_tool.ref"]


def bad_cases():
    return bad_tool_messages(track())


@pytest.mark.parametrize("name, msg, field", bad_cases(), ids=[c[0] for c in bad_cases()])
def test_bad_tracks_name_their_field(name, msg, field):
    assert field_of(lambda: tool_from_proto(msg)) == [field]


def test_frame_count_and_field_prefix():
    msg = tool_to_proto(track(4))
    assert field_of(lambda: tool_from_proto(msg, frames=5)) == ["tool"]
    assert field_of(lambda: tool_from_proto(msg, field="spec.tool", frames=5)) == ["spec.tool"]
    bad = message(track(4).T_base_from_tool[:, :3], track(4).opening)
    assert field_of(lambda: tool_from_proto(bad, field="spec.tool")) == [
        "spec.tool.t_base_from_tool"]


def test_huge_declared_shape_is_refused_before_reading():
    msg = tool_to_proto(track())
    del msg.opening.inline.shape[:]
    msg.opening.inline.shape.extend([10**12])
    assert field_of(lambda: tool_from_proto(msg)) == ["tool.opening.shape"]
