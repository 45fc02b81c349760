"""The object store interface and deterministic keys.

Every object is written with its sha256 recorded next to it (S3 user metadata, or a
sidecar file for the local store) and verified on every read, so corruption
surfaces as `IntegrityError` instead of wrong arrays.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from k4d.errors import IntegrityError, InvalidArgument

_SEGMENT = re.compile(r"^[A-Za-z0-9_.=+@,-]+$")


def job_key(job_id: str, stage: str, name: str) -> str:
    """Deterministic key of a stage output: `jobs/<job_id>/<stage>/<name>`. A redelivered
    event rewrites the same key, which keeps stages idempotent."""
    for field, value in (("job_id", job_id), ("stage", stage)):
        if not value or "/" in value:
            raise InvalidArgument.for_field(field, f"must be a non-empty name without '/', got {value!r}")
    return validate_key(f"jobs/{job_id}/{stage}/{name}")


def validate_key(key: str, field: str = "key") -> str:
    """Keys are relative '/'-separated paths of safe characters; no '..', no hidden parts."""
    parts = key.split("/") if key else []
    if not parts or any(p in ("", ".", "..") or p.startswith(".") or not _SEGMENT.match(p)
                        for p in parts):
        raise InvalidArgument.for_field(
            field, f"invalid object key {key!r}: use '/'-separated names of [A-Za-z0-9_.=+@,-], "
                   "no empty, '.' or '..' parts")
    return key


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    uri: str
    sha256: str
    size_bytes: int


def verify_sha256(key: str, actual: str, recorded: str | None, expected: str | None) -> None:
    """Raise IntegrityError unless `actual` matches every sha256 we know of."""
    if recorded is None and expected is None:
        raise IntegrityError(f"object {key!r} has no recorded sha256; it was not written by k4d")
    for source, want in (("recorded", recorded), ("expected", expected)):
        if want is not None and want != actual:
            raise IntegrityError(
                f"object {key!r} is corrupt: sha256 {actual[:12]}... != {source} {want[:12]}...")


class ObjectStore(ABC):
    """Bytes by key. Implementations: LocalStore (directory), S3Store (S3/MinIO)."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> ObjectInfo: ...

    @abstractmethod
    def put_bytes_if_absent(self, key: str, data: bytes,
                            content_type: str = "application/octet-stream") -> bool:
        """Create the object only if no object has the key (S3 `If-None-Match: *`): True
        when this call created it, False when it existed already (the existing bytes are
        left alone). Concurrent callers on one key: exactly one gets True. The basis of
        create-once records shared by several processes (idempotency keys, final job
        records)."""

    @abstractmethod
    def get_bytes(self, key: str, expected_sha256: str | None = None) -> bytes:
        """The object's bytes, verified against its recorded sha256 (and `expected_sha256`).
        NotFound when absent, IntegrityError on a mismatch."""

    @abstractmethod
    def put_file(self, key: str, path: str | os.PathLike) -> ObjectInfo: ...

    @abstractmethod
    def get_file(self, key: str, path: str | os.PathLike, expected_sha256: str | None = None) -> Path:
        """Download to `path` (atomically), verified like get_bytes."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; absent objects are not an error."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with `prefix`, sorted."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size and recorded sha256 without reading the bytes; NotFound when absent."""

    @abstractmethod
    def presign_get(self, key: str, expires_s: int = 3600) -> str:
        """A URL a plain HTTP client can GET (S3), or the file:// URI (local)."""

    @abstractmethod
    def uri_for(self, key: str) -> str:
        """The stable URI written into TensorRefs (s3://bucket/key, file:///abs/path)."""

    @abstractmethod
    def key_for_uri(self, uri: str) -> str:
        """Inverse of uri_for; InvalidArgument if the URI is not in this store."""

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections (no-op by default)."""
