"""Object storage: one interface (`ObjectStore`), a local directory and S3 implementation,
deterministic keys, and array helpers that write/read `TensorRef`s with sha256 checks."""

from __future__ import annotations

import numpy as np

from k4d.errors import IntegrityError, InvalidArgument
from k4d.store.base import ObjectInfo, ObjectStore, job_key, validate_key
from k4d.store.local import LocalStore
from k4d.tensor_io import TensorRef, array_from_bytes, array_to_bytes

__all__ = ["IntegrityError", "LocalStore", "ObjectInfo", "ObjectStore", "S3Store", "TensorRef",
           "get_array", "job_key", "open_store", "put_array", "validate_key"]


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
