"""The store side of array I/O: `TensorData` inline below the limit, a verified ref into
the store above it; and the layering rule that keeps codecs apart from store access."""

import ast
import subprocess
import sys
from pathlib import Path

import k4d.tensor_io
import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d.store import from_tensor_data, to_tensor_data
from k4d.tensor_io import sha256_array


def test_tensor_io_never_imports_the_store():
    """Codecs and hashing must not depend on store access (issue 19, item 5)."""
    tree = ast.parse(Path(k4d.tensor_io.__file__).read_text())
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)] + [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [m for m in imported if m and m.startswith("k4d.store")], imported
    code = "import sys, k4d.tensor_io; print(sorted(m for m in sys.modules if m.startswith('k4d.store')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tensor_data_inline_below_limit_and_ref_above(local_store):
    small = np.ones((4, 4), np.float64)
    assert to_tensor_data(small).WhichOneof("kind") == "inline"
    big = np.arange(5000, dtype=np.int64)
    msg = to_tensor_data(big, local_store, "jobs/j1/kin/big", inline_limit_bytes=1024)
    assert msg.WhichOneof("kind") == "ref" and msg.ref.size_bytes == big.nbytes
    assert msg.ref.sha256 == sha256_array(big) and list(msg.ref.shape) == [5000]
    assert np.array_equal(from_tensor_data(msg, local_store, "out"), big)
    with pytest.raises(ValueError, match="exceeds the inline limit"):
        to_tensor_data(big, inline_limit_bytes=1024)


def test_tensor_data_unset_or_bad_ref_is_invalid_argument(local_store):
    from kinema4d.v1 import common_pb2

    with pytest.raises(InvalidArgument) as info:
        from_tensor_data(common_pb2.TensorData(), local_store, "req.depth")
    assert info.value.violations[0].field == "req.depth"
    bad_ref = common_pb2.TensorData(ref=common_pb2.TensorRef(uri="file:///x", sha256="ab", dtype="float32"))
    with pytest.raises(InvalidArgument) as info:
        from_tensor_data(bad_ref, local_store, "req.depth")
    assert info.value.violations[0].field == "req.depth.ref.sha256"


def test_tensor_data_max_elements_is_checked_before_any_fetch(local_store):
    from kinema4d.v1 import common_pb2

    small = to_tensor_data(np.zeros((2, 3), np.float32))
    assert from_tensor_data(small, None, "q", max_elements=6).shape == (2, 3)
    # A ref that would fail to fetch: the size guard must answer first.
    huge_ref = common_pb2.TensorData(ref=common_pb2.TensorRef(
        uri="file:///missing", sha256="0" * 64, dtype="float32", shape=[0, 2**62]))
    for data, limit in ((small, 5), (huge_ref, 1000)):
        with pytest.raises(InvalidArgument) as info:
            from_tensor_data(data, local_store, "q", max_elements=limit)
        assert info.value.violations[0].field == "q.shape"
