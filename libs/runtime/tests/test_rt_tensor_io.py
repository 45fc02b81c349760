import numpy as np
import pytest
from k4d import tensor_io as tio
from k4d.errors import InvalidArgument


@pytest.mark.parametrize("dtype", sorted(tio.SUPPORTED_DTYPES))
def test_raw_bytes_round_trip_every_dtype(dtype):
    rng = np.random.default_rng(0)
    array = (rng.random((3, 4, 2)) * 100).astype(dtype)
    data = tio.array_to_bytes(array)
    back = tio.array_from_bytes(data, dtype, (3, 4, 2))
    assert back.dtype == array.dtype and np.array_equal(back, array)


def test_raw_bytes_are_little_endian_and_c_order():
    big = np.arange(6, dtype=">i4").reshape(2, 3).T  # big-endian, Fortran-ordered view
    assert tio.array_to_bytes(big) == np.ascontiguousarray(big).astype("<i4").tobytes()
    assert tio.sha256_array(big) == tio.sha256_array(np.ascontiguousarray(big).astype("<i4"))


def test_bfloat16_and_unknown_dtypes_are_clear_errors():
    with pytest.raises(InvalidArgument, match="bfloat16 is not supported by numpy"):
        tio.check_dtype("bfloat16", "t.dtype")
    with pytest.raises(InvalidArgument) as info:
        tio.array_from_bytes(b"", "complex64", (0,), "poses")
    assert info.value.violations[0].field == "poses.dtype"


def test_size_mismatch_names_the_data_field():
    with pytest.raises(InvalidArgument) as info:
        tio.array_from_bytes(b"\0" * 10, "float32", (2, 2), "req.joints")
    assert info.value.violations[0].field == "req.joints.data"
    assert "needs 16" in str(info.value)


def test_validate_array_binds_symbolic_dims_across_arrays():
    dims = {}
    tio.validate_array(np.zeros((5, 3, 4, 4)), "poses", dtype="float64", shape=("T", "L", 4, 4), dims=dims)
    assert dims == {"T": 5, "L": 3}
    with pytest.raises(InvalidArgument) as info:
        tio.validate_array(np.zeros((6, 7)), "joints", shape=("T", None), dims=dims)
    assert info.value.violations[0].field == "joints" and "expected T=5" in str(info.value)
    with pytest.raises(InvalidArgument, match=r"expected shape \(\*, 4, 4\), got \(2, 3, 3\)"):
        tio.validate_array(np.zeros((2, 3, 3)), "T_world_from_link", shape=(None, 4, 4))
    with pytest.raises(InvalidArgument, match="expected dtype float32 or float64, got int64"):
        tio.validate_array(np.zeros(3, dtype=np.int64), "depth", dtype=("float32", "float64"))
    with pytest.raises(InvalidArgument, match="expected an array"):
        tio.validate_array([1, 2], "depth")


def test_npz_round_trip_and_required_keys(tmp_path):
    arrays = {"joints": np.ones((4, 7), np.float64), "mask": np.zeros((2, 3, 3), bool),
              "link_id": np.full((2, 3, 3), -1, np.int16)}
    path = tio.save_npz(tmp_path / "sub" / "out.npz", arrays)
    loaded = tio.load_npz(path, required=["joints", "mask"])
    assert set(loaded) == set(arrays)
    assert all(np.array_equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in arrays.items())
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(InvalidArgument) as info:
        tio.load_npz(path, required=["joints", "poses"])
    assert [v.field for v in info.value.violations] == ["poses"]


def test_npz_rejects_missing_garbage_and_pickles(tmp_path):
    with pytest.raises(InvalidArgument, match="no such NPZ file"):
        tio.load_npz(tmp_path / "absent.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InvalidArgument, match="not a readable NPZ"):
        tio.load_npz(tmp_path / "junk.npz")
    np.savez(tmp_path / "obj.npz", objs=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InvalidArgument, match="not a readable NPZ"):
        tio.load_npz(tmp_path / "obj.npz")


def test_safetensors_round_trip_with_metadata(tmp_path):
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.float16)}
    path = tio.save_safetensors(tmp_path / "m.safetensors", arrays, {"format": "k4d"})
    loaded = tio.load_safetensors(path)
    assert np.array_equal(loaded["w"], arrays["w"]) and loaded["b"].dtype == np.float16
    assert tio.safetensors_metadata(path) == {"format": "k4d"}
    assert tio.load_safetensors_bytes(tio.safetensors_bytes(arrays))["w"].shape == (3, 4)
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 20)
    with pytest.raises(InvalidArgument, match="not a readable safetensors"):
        tio.load_safetensors(tmp_path / "bad.safetensors")


def test_inline_decision_by_size():
    assert tio.should_inline(tio.INLINE_LIMIT_BYTES)
    assert not tio.should_inline(tio.INLINE_LIMIT_BYTES + 1)
    assert tio.should_inline(10, limit_bytes=10) and not tio.should_inline(11, limit_bytes=10)


def test_sha256_file_matches_bytes(tmp_path):
    data = np.random.default_rng(1).bytes(3 << 20)
    (tmp_path / "f").write_bytes(data)
    assert tio.sha256_file(tmp_path / "f", chunk_bytes=1 << 20) == tio.sha256_bytes(data)


def test_proto_tensor_round_trip_and_malformed_messages():
    from kinema4d.v1 import common_pb2

    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    msg = tio.to_tensor(array)
    assert (msg.dtype, list(msg.shape), len(msg.data)) == ("float32", [2, 3, 4], 96)
    assert np.array_equal(tio.from_tensor(common_pb2.Tensor.FromString(msg.SerializeToString())), array)
    bad = common_pb2.Tensor(dtype="float32", shape=[2, 2], data=b"\0" * 12)
    with pytest.raises(InvalidArgument) as info:
        tio.from_tensor(bad, "request.joints")
    assert info.value.violations[0].field == "request.joints.data"


@pytest.mark.parametrize("shape", [(0, 2**62), (2**61, 8), (1,) * 9])
def test_rt_hostile_shapes_are_invalid_argument(shape):
    from k4d.errors import InvalidArgument
    from k4d.tensor_io import array_from_bytes

    with pytest.raises(InvalidArgument) as info:
        array_from_bytes(b"", "float32", shape, field="joints")
    assert info.value.violations[0].field == "joints.shape"


def test_rt_read_array_file_forms_and_errors(tmp_path):
    from k4d.tensor_io import read_array_file

    q = np.arange(6.0).reshape(2, 3)
    np.save(tmp_path / "q.npy", q)
    np.savez(tmp_path / "one.npz", anything=q)
    np.savez(tmp_path / "many.npz", joints=q, other=q * 2)
    (tmp_path / "q.json").write_text("[[0, 1, 2], [3, 4, 5]]")
    for name in ("q.npy", "one.npz", "many.npz", "q.json"):
        np.testing.assert_array_equal(read_array_file(tmp_path / name, "joints"), q)
    np.savez(tmp_path / "ambiguous.npz", a=q, b=q)
    (tmp_path / "bad.json").write_text("[[0, 1], [2")
    np.save(tmp_path / "obj.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    for name, text in [("ambiguous.npz", "has no 'joints' array"), ("bad.json", "cannot read"),
                       ("obj.npy", "cannot read"), ("missing.npy", "no such file")]:
        with pytest.raises(InvalidArgument, match=text) as info:
            read_array_file(tmp_path / name, "joints")
        assert info.value.violations[0].field == "joints"
