"""Object store in a local directory: the embedded default (`file:///path`).

Layout: `<root>/<key>` holds the bytes, `<root>/.k4d-meta/<key>.sha256` the recorded
hash. Writes go through a temp file + rename, so readers never see partial objects.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from k4d.errors import InvalidArgument, NotFound
from k4d.store.base import ObjectInfo, ObjectStore, validate_key, verify_sha256
from k4d.tensor_io import sha256_bytes, sha256_file

META_DIR = ".k4d-meta"
# A rewrite of a mutable key (a job record) lands its new hash before its new bytes, so a
# reader in between sees a mismatch that resolves in milliseconds: read again this many
# times before calling the object corrupt.
REWRITE_RACE_READS = 8


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _atomic_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class LocalStore(ObjectStore):
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_uri(cls, uri: str) -> LocalStore:
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise InvalidArgument.for_field("store_uri", f"expected file:///abs/path, got {uri!r}")
        return cls(unquote(parsed.path))

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    def _meta_path(self, key: str) -> Path:
        return self.root / META_DIR / f"{validate_key(key)}.sha256"

    def _recorded(self, key: str) -> str | None:
        meta = self._meta_path(key)
        return meta.read_text().strip() if meta.is_file() else None

    def put_bytes(self, key, data, content_type="application/octet-stream"):
        digest = sha256_bytes(data)
        # Hash first, then data: a reader racing a rewrite of the same deterministic key
        # sees the same bytes either way.
        _atomic_write_bytes(self._meta_path(key), digest.encode())
        _atomic_write_bytes(self._path(key), bytes(data))
        return ObjectInfo(key, self.uri_for(key), digest, len(data))

    def put_bytes_if_absent(self, key, data, content_type="application/octet-stream"):
        import fcntl

        path = self._path(key)
        lock_path = self.root / META_DIR / ".create.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        # One lock file for the whole store: processes sharing the directory serialise
        # the check-and-create (creates are rare: idempotency keys, final records).
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if path.exists():
                    return False
                self.put_bytes(key, data, content_type)
                return True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def get_bytes(self, key, expected_sha256=None):
        path = self._path(key)
        for attempt in range(REWRITE_RACE_READS):
            try:
                data = path.read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                raise NotFound(f"object {key!r} not found in {self.root}") from None
            digest, recorded = sha256_bytes(data), self._recorded(key)
            if recorded is None or recorded == digest:
                break
            time.sleep(0.005 * (attempt + 1))  # a concurrent rewrite is between its two renames
        verify_sha256(key, digest, recorded, expected_sha256)
        return data

    def put_file(self, key, path):
        src = Path(path)
        digest = sha256_file(src)
        _atomic_write_bytes(self._meta_path(key), digest.encode())
        _atomic_copy(src, self._path(key))
        return ObjectInfo(key, self.uri_for(key), digest, src.stat().st_size)

    def get_file(self, key, path, expected_sha256=None):
        src, dst = self._path(key), Path(path)
        if not src.is_file():
            raise NotFound(f"object {key!r} not found in {self.root}")
        verify_sha256(key, sha256_file(src), self._recorded(key), expected_sha256)
        _atomic_copy(src, dst)
        return dst

    def exists(self, key):
        return self._path(key).is_file()

    def delete(self, key):
        self._path(key).unlink(missing_ok=True)
        self._meta_path(key).unlink(missing_ok=True)

    def list(self, prefix=""):
        keys = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue  # temp files of writes in flight
                key = Path(dirpath, name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def stat(self, key):
        path = self._path(key)
        if not path.is_file():
            raise NotFound(f"object {key!r} not found in {self.root}")
        return ObjectInfo(key, self.uri_for(key), self._recorded(key) or "", path.stat().st_size)

    def presign_get(self, key, expires_s=3600):
        return self.uri_for(key)

    def uri_for(self, key):
        return self._path(key).as_uri()

    def key_for_uri(self, uri):
        parsed = urlparse(uri)
        path = Path(unquote(parsed.path))
        if parsed.scheme != "file" or not path.is_relative_to(self.root):
            raise InvalidArgument.for_field("uri", f"{uri!r} is not in the local store {self.root}")
        return validate_key(path.relative_to(self.root).as_posix(), "uri")
