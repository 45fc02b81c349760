"""Where a dataset lives: a local directory or an S3 prefix, behind one small interface.

Local roots use plain files (atomic writes by temp file + rename); `s3://` roots use
s3fs with the platform's S3 settings (K4D_S3_* via k4d.config), and zarr streams each
array chunk through its FsspecStore, so nothing copies a whole dataset.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from urllib.parse import unquote, urlparse

from k4d.errors import FailedPrecondition, InvalidArgument


def _require_data_extra():
    try:
        import zarr  # noqa: F401
    except ImportError:
        raise FailedPrecondition("datasets need zarr: pip install 'k4d-runtime[data]'") from None


class Location(ABC):
    """Relative '/'-separated paths under one dataset root."""

    uri: str

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes | None:
        """The object's bytes, or None when absent."""

    @abstractmethod
    def write_atomic(self, rel: str, data: bytes) -> None:
        """Readers see the old bytes or the new ones, never a partial object."""

    @abstractmethod
    def list_names(self, rel: str = "") -> list[str]:
        """Names directly below `rel` (files and folders), sorted; [] when absent."""

    @abstractmethod
    def list_versions(self, rel: str = "") -> dict[str, str]:
        """Objects directly below `rel` -> a tag that changes whenever the object is
        rewritten (S3: its ETag; local: inode, size and mtime), from one listing."""

    def read_many(self, rels: list[str]) -> dict[str, bytes | None]:
        """Several small objects at once (S3: concurrent GETs); None for absent ones."""
        return {rel: self.read_bytes(rel) for rel in rels}

    @abstractmethod
    def remove_tree(self, rel: str) -> None: ...

    @abstractmethod
    def size_bytes(self, rel: str) -> int:
        """Total bytes stored below `rel`."""

    @abstractmethod
    def zarr_store(self, rel: str, read_only: bool): ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class LocalLocation(Location):
    def __init__(self, root: Path):
        self.root = root.expanduser().resolve()
        self.uri = self.root.as_uri()
        if self.root.exists() and not self.root.is_dir():
            raise InvalidArgument.for_field("uri", f"{self.root} exists and is not a directory")

    def _path(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def read_bytes(self, rel):
        try:
            return self._path(rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write_atomic(self, rel, data):
        path = self._path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def list_names(self, rel=""):
        path = self._path(rel)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []

    def list_versions(self, rel=""):
        path = self._path(rel)
        if not path.is_dir():
            return {}
        out = {}
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file():
                    # Every write is a new file renamed into place: a new inode, even
                    # where timestamps are coarse.
                    st = entry.stat()
                    out[entry.name] = f"{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"
        return out

    def remove_tree(self, rel):
        path = self._path(rel)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def size_bytes(self, rel):
        path = self._path(rel)
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

    def zarr_store(self, rel, read_only):
        from zarr.storage import LocalStore

        return LocalStore(self._path(rel), read_only=read_only)


def _s3_errors(method):
    """botocore's missing-credentials error as one line naming the settings (CLI exit 2)
    instead of a traceback; everything else passes through."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ != "NoCredentialsError":
                raise
            raise FailedPrecondition(
                f"{self.uri}: no S3 credentials: set K4D_S3_ACCESS_KEY and K4D_S3_SECRET_KEY "
                "(docs/configuration.md) or an AWS credentials chain") from None

    return wrapper


class S3Location(Location):
    def __init__(self, uri: str, config=None):
        import s3fs

        parsed = urlparse(uri)
        if not parsed.netloc:
            raise InvalidArgument.for_field("uri", f"expected s3://bucket[/prefix], got {uri!r}")
        if config is None:
            from k4d.config import load_config

            config = load_config()
        if not config.s3_endpoint:
            raise InvalidArgument.for_field("K4D_S3_ENDPOINT", "an s3:// dataset needs an endpoint (host:port)")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.root = f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket
        self.uri = f"s3://{self.root}"
        scheme = "https" if config.s3_secure else "http"
        self.storage_options = {
            "key": config.s3_access_key or None, "secret": config.s3_secret_key or None,
            "endpoint_url": f"{scheme}://{config.s3_endpoint}",
            "client_kwargs": {"region_name": config.s3_region or None},
            # Listings change under us (other writers): never serve them from a cache.
            "use_listings_cache": False,
        }
        self.fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    @_s3_errors
    def ensure_bucket(self) -> None:
        if self.fs.exists(self.bucket):
            return
        region = self.storage_options["client_kwargs"]["region_name"]
        if region in (None, "us-east-1"):
            # us-east-1 takes no LocationConstraint (s3fs' mkdir would send one).
            self.fs.call_s3("create_bucket", Bucket=self.bucket)
        else:
            self.fs.mkdir(self.bucket, region_name=region)

    @_s3_errors
    def read_bytes(self, rel):
        try:
            return self.fs.cat_file(self._path(rel))
        except FileNotFoundError:
            return None

    @_s3_errors
    def write_atomic(self, rel, data):
        # One PUT: S3 makes a single object visible whole or not at all.
        self.fs.pipe_file(self._path(rel), data)

    @_s3_errors
    def read_many(self, rels):
        # s3fs fetches a list of paths concurrently (asyncio), one request each.
        paths = {self._path(rel): rel for rel in rels}
        got = self.fs.cat(list(paths), on_error="return") if paths else {}
        out = {}
        for path, rel in paths.items():
            value = got.get(path, FileNotFoundError(path))
            if isinstance(value, FileNotFoundError):
                value = None
            elif isinstance(value, Exception):
                raise value
            out[rel] = value
        return out

    @_s3_errors
    def list_names(self, rel=""):
        try:
            entries = self.fs.ls(self._path(rel), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    @_s3_errors
    def list_versions(self, rel=""):
        try:
            entries = self.fs.ls(self._path(rel), detail=True, refresh=True)
        except FileNotFoundError:
            return {}
        return {e["name"].rstrip("/").rsplit("/", 1)[-1]:
                str(e.get("ETag") or e.get("etag") or f"{e.get('size')}-{e.get('LastModified')}")
                for e in entries if e.get("type") == "file"}

    @_s3_errors
    def remove_tree(self, rel):
        path = self._path(rel)
        try:
            if self.fs.find(path):
                self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    @_s3_errors
    def size_bytes(self, rel):
        try:
            return int(self.fs.du(self._path(rel), total=True))
        except FileNotFoundError:
            return 0

    def zarr_store(self, rel, read_only):
        from zarr.storage import FsspecStore

        return FsspecStore.from_url(f"s3://{self._path(rel)}", storage_options=self.storage_options,
                                    read_only=read_only)


def open_location(uri: str | os.PathLike, config=None) -> Location:
    """`s3://bucket/prefix`, `file:///abs/path` or a plain local path."""
    _require_data_extra()
    uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        raise InvalidArgument.for_field("uri", "a dataset URI is required")
    if uri.startswith("s3://"):
        return S3Location(uri, config)
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            raise InvalidArgument.for_field("uri", f"expected file:///abs/path, got {uri!r}")
        return LocalLocation(Path(unquote(parsed.path)))
    if "://" in uri:
        raise InvalidArgument.for_field("uri", f"expected a path, file:///path or s3://bucket/prefix, got {uri!r}")
    return LocalLocation(Path(uri))
