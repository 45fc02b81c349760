"""Object storage: one interface (`ObjectStore`), a local directory and S3 implementation,
deterministic keys, and the store side of array I/O: arrays put and fetched by `TensorRef`
with sha256 checks, and the proto `TensorData` (inline when small, a ref into the store
above the limit). The codecs themselves live in `k4d.tensor_io`, which never imports this
package."""

from __future__ import annotations

import math

import numpy as np

from k4d.errors import InvalidArgument
from k4d.store.base import ObjectInfo, ObjectStore, job_key, validate_key
from k4d.store.local import LocalStore
from k4d.tensor_io import (
    INLINE_LIMIT_BYTES,
    TensorRef,
    array_from_bytes,
    array_to_bytes,
    from_tensor,
    should_inline,
    to_tensor,
)

__all__ = ["LocalStore", "ObjectInfo", "ObjectStore", "S3Store", "from_tensor_data", "get_array",
           "job_key", "open_store", "put_array", "to_tensor_data", "validate_key"]


def __getattr__(name: str):
    # S3Store pulls in minio/urllib3; load it only when asked for.
    if name == "S3Store":
        from k4d.store.s3 import S3Store

        return S3Store
    raise AttributeError(name)


def open_store(uri: str | None = None, config=None) -> ObjectStore:
    """The store named by `uri` (default: config.store_uri, i.e. K4D_STORE_URI):
    `file:///path` -> LocalStore, `s3://bucket[/prefix]` -> S3Store (bucket created if missing)."""
    if config is None:
        from k4d.config import load_config

        config = load_config()
    uri = uri or config.store_uri
    if uri.startswith("file://"):
        return LocalStore.from_uri(uri)
    if uri.startswith("s3://"):
        from k4d.store.s3 import S3Store

        return S3Store.from_uri(uri, config)
    raise InvalidArgument.for_field("store_uri", f"expected file:///path or s3://bucket, got {uri!r}")


def put_array(store: ObjectStore, key: str, array: np.ndarray) -> TensorRef:
    """Store `array` in raw form (C order, little-endian) under `key`; return its TensorRef."""
    data = array_to_bytes(array)
    info = store.put_bytes(key, data)
    return TensorRef(uri=info.uri, sha256=info.sha256, dtype=array.dtype.name,
                     shape=tuple(int(d) for d in array.shape), size_bytes=info.size_bytes)


def get_array(store: ObjectStore, ref: TensorRef, field: str = "ref") -> np.ndarray:
    """Fetch the array behind `ref`, verified against ref.sha256 (IntegrityError if not)."""
    data = store.get_bytes(store.key_for_uri(ref.uri), expected_sha256=ref.sha256)
    return array_from_bytes(data, ref.dtype, ref.shape, field)


def to_tensor_data(array: np.ndarray, store=None, key: str | None = None,
                   inline_limit_bytes: int = INLINE_LIMIT_BYTES):
    """proto `TensorData`: inline when small, else stored under `key` in `store` as a ref."""
    from kinema4d.v1 import common_pb2

    if should_inline(array.nbytes, inline_limit_bytes):
        return common_pb2.TensorData(inline=to_tensor(array))
    if store is None or key is None:
        raise ValueError(f"array of {array.nbytes} bytes exceeds the inline limit; "
                         "a store and key are needed")
    return common_pb2.TensorData(ref=put_array(store, key, array).to_proto())


def from_tensor_data(msg, store=None, field: str = "tensor",
                     max_elements: int | None = None) -> np.ndarray:
    """proto `TensorData` -> numpy (fetching and verifying a ref through `store`).
    `max_elements` bounds the declared shape before any bytes are decoded or fetched."""
    kind = msg.WhichOneof("kind")
    if max_elements is not None:
        shape = msg.inline.shape if kind == "inline" else msg.ref.shape if kind == "ref" else []
        # Exact integer arithmetic: numpy's int64 product overflows on hostile shapes, and a
        # zero-size array with a 2**62 dimension still cannot be reshaped.
        if any(d < 0 or d > max_elements for d in shape) or math.prod(shape) > max_elements:
            raise InvalidArgument.for_field(f"{field}.shape", f"invalid or larger than "
                                            f"{max_elements} elements: {list(shape)}")
    if kind == "inline":
        return from_tensor(msg.inline, f"{field}.inline")
    if kind == "ref":
        if store is None:
            raise InvalidArgument.for_field(f"{field}.ref", "references need an object store")
        return get_array(store, TensorRef.from_proto(msg.ref, f"{field}.ref"), field=f"{field}.ref")
    raise InvalidArgument.for_field(field, "neither inline nor ref is set")
