"""Run and checkpoint locations as fsspec filesystems: a plain path, `file:///path` or
`s3://bucket/prefix` (S3 settings from `k4d.config`: K4D_S3_ENDPOINT, K4D_S3_ACCESS_KEY, ...).

One place turns a URI into `(filesystem, path)` and into the storage options that
`torch.distributed.checkpoint`'s fsspec writer/reader take, so every run file and every
checkpoint shard goes through the same credentials.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from k4d.errors import InvalidArgument


def is_remote(uri: str) -> bool:
    return str(uri).startswith("s3://")


def normalize(uri: str | os.PathLike) -> str:
    """A plain path becomes an absolute `file://` URI; `file://` and `s3://` pass through."""
    text = str(uri)
    if text.startswith("s3://"):
        parsed = urlparse(text)
        if not parsed.netloc:
            raise InvalidArgument.for_field("uri", f"expected s3://bucket[/prefix], got {text!r}")
        return text.rstrip("/")
    if "://" in text and not text.startswith("file://"):
        raise InvalidArgument.for_field("uri", f"expected a path, file:///path or s3://bucket/..., "
                                               f"got {text!r}")
    path = Path(text[len("file://"):] if text.startswith("file://") else text)
    return path.expanduser().resolve().as_uri()


def _s3_location(uri: str, config=None):
    # The episode format's S3 location holds the platform's one s3fs set-up (endpoint,
    # credentials, no listing cache); runs and checkpoints use the same.
    from k4d.episodes.location import S3Location

    return S3Location(uri, config)


def storage_options(uri: str, config=None) -> dict:
    """fsspec keyword arguments for `uri` (empty for local paths); what
    torch.distributed.checkpoint's FsspecWriter/FsspecReader take."""
    return dict(_s3_location(uri, config).storage_options) if is_remote(uri) else {}


def filesystem(uri: str, config=None):
    """(fsspec filesystem, path inside it) for a URI."""
    uri = normalize(uri)
    if is_remote(uri):
        location = _s3_location(uri, config)
        return location.fs, location.root
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem(auto_mkdir=True), uri[len("file://"):]


def join(uri: str, *parts: str) -> str:
    return "/".join([normalize(uri), *(p.strip("/") for p in parts)])


def write_atomic(fs, path: str, data: bytes) -> None:
    """Readers never see a partial file: a local file is renamed into place (the episode
    format's local writer), an S3 PUT is atomic by itself."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        from k4d.episodes.location import LocalLocation

        LocalLocation(Path(path).parent).write_atomic(Path(path).name, data)
    else:
        fs.pipe_file(path, data)
