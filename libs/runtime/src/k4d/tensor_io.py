"""Array codecs and hashing: NPZ and safetensors files, raw little-endian bytes, sha256,
dtype/shape validation and the proto `Tensor` / `TensorRef` forms. No store access here:
putting arrays into object storage and the inline-or-ref `TensorData` form live in
`k4d.store` (which imports this module, never the other way round).

Raw form (what `Tensor.data` carries and what an object behind a `TensorRef` holds):
C-order, little-endian element bytes; dtype and shape travel next to them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from k4d.errors import FieldViolation, InvalidArgument

MIB = 1 << 20
INLINE_LIMIT_BYTES = 1 * MIB

SUPPORTED_DTYPES = frozenset(
    ["float16", "float32", "float64", "uint8", "uint16", "uint32", "uint64",
     "int8", "int16", "int32", "int64", "bool"])

Dim = int | str | None  # fixed size, symbolic name bound across arrays, or any


def check_dtype(name: str, field: str = "dtype") -> np.dtype:
    """The numpy dtype for a dtype string; InvalidArgument for anything unsupported."""
    if name == "bfloat16":
        raise InvalidArgument.for_field(
            field, "bfloat16 is not supported by numpy; convert to float32 or float16 first")
    if name not in SUPPORTED_DTYPES:
        raise InvalidArgument.for_field(
            field, f"unsupported dtype {name!r}; expected one of {sorted(SUPPORTED_DTYPES)}")
    return np.dtype(name)


def _shape_text(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join("*" if d is None else str(d) for d in shape) + ")"


def validate_array(array: object, field: str, *, dtype: str | Sequence[str] | None = None,
                   shape: Sequence[Dim] | None = None,
                   dims: dict[str, int] | None = None) -> np.ndarray:
    """Check an array's dtype and shape; raise InvalidArgument naming `field`.

    shape: entries are ints (exact), None (any) or names ("T"): a name binds to its
    first size, in `dims` if given, so several arrays can share T, H, W.
    Example: validate_array(poses, "poses", dtype="float64", shape=("T", "L", 4, 4), dims=d)
    """
    if not isinstance(array, np.ndarray):
        raise InvalidArgument.for_field(field, f"expected an array, got {type(array).__name__}")
    if dtype is not None:
        allowed = [dtype] if isinstance(dtype, str) else list(dtype)
        if array.dtype.name not in allowed:
            raise InvalidArgument.for_field(
                field, f"expected dtype {' or '.join(allowed)}, got {array.dtype.name}")
    if shape is not None:
        dims = {} if dims is None else dims
        if array.ndim != len(shape):
            raise InvalidArgument.for_field(
                field, f"expected shape {_shape_text(shape)}, got {tuple(array.shape)}")
        for axis, (want, got) in enumerate(zip(shape, array.shape, strict=True)):
            if isinstance(want, str):
                bound = dims.setdefault(want, got)
                if bound != got:
                    raise InvalidArgument.for_field(
                        field, f"axis {axis} ({want}) is {got}, expected {want}={bound} "
                               f"(shape {_shape_text(shape)}, got {tuple(array.shape)})")
            elif want is not None and want != got:
                raise InvalidArgument.for_field(
                    field, f"expected shape {_shape_text(shape)}, got {tuple(array.shape)}")
    return array


# --- raw bytes and hashes ---------------------------------------------------------

def array_to_bytes(array: np.ndarray) -> bytes:
    """C-order little-endian bytes of `array`."""
    check_dtype(array.dtype.name, "dtype")
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return np.ascontiguousarray(little).tobytes()


# Bounds on any shape read from the wire (far above any real rollout).
MAX_RANK = 8
MAX_ELEMENTS = 2**40


def array_from_bytes(data: bytes, dtype: str, shape: Sequence[int], field: str = "") -> np.ndarray:
    """Rebuild an array from raw bytes; InvalidArgument when the size does not match."""
    prefix = f"{field}." if field else ""
    np_dtype = check_dtype(dtype, prefix + "dtype")
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise InvalidArgument.for_field(prefix + "shape", f"negative dimension in {shape}")
    # Python ints: a hostile shape must not overflow int64 or reach numpy's
    # "array is too big" (a zero dimension makes the byte count 0 for any others).
    if len(shape) > MAX_RANK or math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
        raise InvalidArgument.for_field(
            prefix + "shape", f"{shape} exceeds {MAX_RANK} dimensions or {MAX_ELEMENTS} elements")
    expected = math.prod(shape) * np_dtype.itemsize
    if len(data) != expected:
        raise InvalidArgument.for_field(
            prefix + "data", f"has {len(data)} bytes, dtype {dtype} shape {shape} needs {expected}")
    array = np.frombuffer(data, dtype=np_dtype.newbyteorder("<")).reshape(shape)
    return array.astype(np_dtype, copy=False)


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_array(array: np.ndarray) -> str:
    """sha256 of the raw form (equals the sha256 of the stored object)."""
    return sha256_bytes(array_to_bytes(array))


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 8 * MIB) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def should_inline(nbytes: int, limit_bytes: int = INLINE_LIMIT_BYTES) -> bool:
    """Inline (proto Tensor) up to `limit_bytes`, by reference (TensorRef) above it."""
    return nbytes <= limit_bytes


# --- files ------------------------------------------------------------------------

# mkstemp creates 0600; written outputs are meant to be shared like any other file.
_DEFAULT_FILE_MODE = 0o644


def _atomic_write(path: Path, write) -> None:
    """Write through a temp file in the same directory, then rename: readers never
    see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, _DEFAULT_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray], compressed: bool = True) -> Path:
    path = Path(path)
    for key, array in arrays.items():
        validate_array(array, key)
    save = np.savez_compressed if compressed else np.savez
    _atomic_write(path, lambda f: save(f, **arrays))
    return path


def read_array_file(path: str | os.PathLike, field: str) -> np.ndarray:
    """One array from a user's file (CLI input): `.npy`, `.json` (nested lists) or `.npz`
    (the array named `field`, or its only array). Never unpickles; every failure is
    InvalidArgument naming `field`."""
    file = Path(path)
    if not file.is_file():
        raise InvalidArgument.for_field(field, f"no such file: {path}")
    try:
        if file.suffix == ".json":
            return np.asarray(json.loads(file.read_text()), dtype=np.float64)
        data = np.load(file, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            return data
        with data:
            key = field if field in data.files else (data.files[0] if len(data.files) == 1 else None)
            if key is None:
                raise InvalidArgument.for_field(field, f"{path} has no {field!r} array "
                                                f"(has {data.files})")
            return data[key]
    except InvalidArgument:
        raise
    except (ValueError, OSError, TypeError, EOFError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidArgument.for_field(field, f"cannot read {path}: {exc}") from None


def load_npz(path: str | os.PathLike, required: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """All arrays of an NPZ file (never unpickles). Missing `required` keys -> InvalidArgument."""
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument.for_field(str(path), "no such NPZ file")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except ValueError as exc:
        raise InvalidArgument.for_field(str(path), f"not a readable NPZ file: {exc}") from None
    except (OSError, EOFError) as exc:
        raise InvalidArgument.for_field(str(path), f"not a readable NPZ file: {exc}") from None
    missing = [key for key in required if key not in arrays]
    if missing:
        raise InvalidArgument(
            f"{path}: missing arrays {missing} (has {sorted(arrays)})",
            [FieldViolation(key, "required array missing from the NPZ file") for key in missing])
    return arrays


def safetensors_bytes(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    from safetensors.numpy import save

    for key, array in arrays.items():
        check_dtype(array.dtype.name, key)
    contiguous = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    return save(contiguous, metadata=dict(metadata) if metadata else None)


def save_safetensors(path: str | os.PathLike, arrays: Mapping[str, np.ndarray],
                     metadata: Mapping[str, str] | None = None) -> Path:
    path = Path(path)
    data = safetensors_bytes(arrays, metadata)
    _atomic_write(path, lambda f: f.write(data))
    return path


def load_safetensors_bytes(data: bytes, source: str = "safetensors") -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    try:
        return load(data)
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise InvalidArgument.for_field(source, f"not a readable safetensors file: {exc}") from None


def load_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument.for_field(str(path), "no such safetensors file")
    return load_safetensors_bytes(path.read_bytes(), str(path))


def safetensors_metadata(path: str | os.PathLike) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return dict(f.metadata() or {})


# --- references and protos --------------------------------------------------------

@dataclass(frozen=True)
class TensorRef:
    """An array in object storage: `uri` of the raw-form object, its sha256, dtype, shape."""

    uri: str
    sha256: str
    dtype: str
    shape: tuple[int, ...]
    size_bytes: int

    def to_proto(self):
        from kinema4d.v1 import common_pb2

        return common_pb2.TensorRef(uri=self.uri, sha256=self.sha256, dtype=self.dtype,
                                    shape=list(self.shape), size_bytes=self.size_bytes)

    @classmethod
    def from_proto(cls, msg, field: str = "ref") -> TensorRef:
        if not msg.uri:
            raise InvalidArgument.for_field(f"{field}.uri", "must not be empty")
        if len(msg.sha256) != 64:
            raise InvalidArgument.for_field(f"{field}.sha256", "expected 64 hex characters")
        check_dtype(msg.dtype, f"{field}.dtype")
        return cls(uri=msg.uri, sha256=msg.sha256, dtype=msg.dtype,
                   shape=tuple(int(d) for d in msg.shape), size_bytes=int(msg.size_bytes))


def to_tensor(array: np.ndarray):
    """numpy -> proto `kinema4d.v1.Tensor` (inline)."""
    from kinema4d.v1 import common_pb2

    return common_pb2.Tensor(dtype=array.dtype.name, shape=list(array.shape),
                             data=array_to_bytes(array))


def from_tensor(msg, field: str = "tensor") -> np.ndarray:
    """proto `Tensor` -> numpy; InvalidArgument (with field paths) on a malformed message."""
    return array_from_bytes(msg.data, msg.dtype, msg.shape, field)
