"""Safe extraction of robot bundles (zip or tar, optionally gz/bz2/xz compressed).

A pure function of (archive file, empty destination directory, limits). Rejected with
InvalidArgument: absolute names, `..` components, backslashes or NUL in names, device
files and FIFOs, links whose target leaves the tree, duplicate names, more than
`max_files` entries, files over `max_file_bytes`, more than `max_total_bytes` in all,
and archives whose expansion ratio exceeds `max_ratio` (a decompression bomb). Sizes
are counted on the bytes actually written, not the sizes the archive declares.
In-tree links are materialised as copies of their target, so the extracted tree holds
regular files and directories only.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from k4d.errors import InvalidArgument

CHUNK = 1 << 20


@dataclass(frozen=True)
class BundleLimits:
    max_files: int = 2_000
    max_file_bytes: int = 128 * 1024 * 1024
    max_total_bytes: int = 512 * 1024 * 1024
    max_ratio: float = 200.0  # uncompressed / archive size
    ratio_floor_bytes: int = 16 * 1024 * 1024  # small archives may expand more than max_ratio


@dataclass
class _Entry:
    name: str  # normalised relative POSIX path
    kind: str  # "file" | "dir" | "link"
    link_target: str | None = None  # normalised relative path of the link's target


def safe_extract(archive: str | os.PathLike, dest: str | os.PathLike,
                 limits: BundleLimits = BundleLimits()) -> list[str]:
    """Extract `archive` into the empty directory `dest`; returns the relative paths of
    the extracted files. On error `dest` may hold a partial tree: the caller deletes it."""
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise InvalidArgument.for_field("dest", "extraction directory must be empty")
    budget = _Budget(limits, archive.stat().st_size)
    if zipfile.is_zipfile(archive):
        return _extract_zip(archive, dest.resolve(), budget)
    if _is_tar(archive):
        return _extract_tar(archive, dest.resolve(), budget)
    raise InvalidArgument.for_field("bundle", "not a zip or tar archive")


class _Budget:
    def __init__(self, limits: BundleLimits, archive_bytes: int):
        self.limits = limits
        self.files = 0
        self.total = 0
        self.allowed_total = min(limits.max_total_bytes,
                                 max(limits.ratio_floor_bytes, int(archive_bytes * limits.max_ratio)))

    def count_entry(self, name: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise InvalidArgument.for_field("bundle", f"more than {self.limits.max_files} entries")

    def count_bytes(self, name: str, file_bytes: int, added: int) -> None:
        self.total += added
        if file_bytes > self.limits.max_file_bytes:
            raise InvalidArgument.for_field(f"bundle[{name}]",
                                            f"file larger than {self.limits.max_file_bytes} bytes")
        if self.total > self.allowed_total:
            raise InvalidArgument.for_field(
                "bundle", f"expands to more than {self.allowed_total} bytes "
                          "(size limit or decompression-bomb guard)")


def _normalise(name: str) -> str:
    if not name or "\x00" in name or "\\" in name:
        raise InvalidArgument.for_field(f"bundle[{name!r}]", "invalid entry name")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise InvalidArgument.for_field(f"bundle[{name}]", "absolute path in archive")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise InvalidArgument.for_field(f"bundle[{name}]", "path escapes the bundle ('..')")
    if not parts:
        raise InvalidArgument.for_field(f"bundle[{name!r}]", "empty entry name")
    return "/".join(parts)


def _link_target(name: str, target: str, relative_to_link: bool) -> str:
    if not target or target.startswith("/") or "\x00" in target or "\\" in target:
        raise InvalidArgument.for_field(f"bundle[{name}]", f"link target {target!r} leaves the tree")
    base = posixpath.dirname(name) if relative_to_link else ""
    joined = posixpath.normpath(posixpath.join(base, target))
    if joined == ".." or joined.startswith("../") or joined == ".":
        raise InvalidArgument.for_field(f"bundle[{name}]", f"link target {target!r} leaves the tree")
    return joined


def _write_stream(stream, dest: Path, entry: _Entry, budget: _Budget) -> None:
    path = dest / entry.name
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_inside(path.parent, dest, entry.name)
    written = 0
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        raise InvalidArgument.for_field(f"bundle[{entry.name}]", "duplicate entry") from None
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = stream.read(CHUNK)
            if not chunk:
                break
            written += len(chunk)
            budget.count_bytes(entry.name, written, len(chunk))
            out.write(chunk)


def _check_inside(path: Path, dest: Path, name: str) -> None:
    resolved = path.resolve()
    if resolved != dest and dest not in resolved.parents:
        raise InvalidArgument.for_field(f"bundle[{name}]", "path escapes the bundle")


def _materialise_links(links: list[_Entry], dest: Path, budget: _Budget) -> list[str]:
    created = []
    for entry in links:
        source = dest / entry.link_target
        _check_inside(source, dest, entry.name)
        if not source.is_file() or source.is_symlink():
            raise InvalidArgument.for_field(f"bundle[{entry.name}]",
                                            f"link target {entry.link_target!r} is not a file "
                                            "in the bundle")
        with open(source, "rb") as stream:
            _write_stream(stream, dest, entry, budget)
        created.append(entry.name)
    return created


def _extract_zip(archive: Path, dest: Path, budget: _Budget) -> list[str]:
    files, links = [], []
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                budget.count_entry(info.filename)
                name = _normalise(info.filename)
                mode = info.external_attr >> 16
                if info.is_dir():
                    (dest / name).mkdir(parents=True, exist_ok=True)
                    _check_inside(dest / name, dest, name)
                elif stat.S_ISLNK(mode):
                    if info.file_size > 4096:
                        raise InvalidArgument.for_field(f"bundle[{name}]", "oversized link entry")
                    target = zf.read(info).decode("utf-8", errors="replace")
                    links.append(_Entry(name, "link", _link_target(name, target, True)))
                elif stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                    raise InvalidArgument.for_field(f"bundle[{name}]", "special file in archive")
                else:
                    budget.count_bytes(name, info.file_size, 0)  # cheap early check
                    with zf.open(info) as stream:
                        _write_stream(stream, dest, _Entry(name, "file"), budget)
                    files.append(name)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, NotImplementedError) as exc:
        raise InvalidArgument.for_field("bundle", f"corrupt zip archive: {exc}") from None
    return files + _materialise_links(links, dest, budget)


def _is_tar(archive: Path) -> bool:
    try:
        return tarfile.is_tarfile(archive)
    except (OSError, tarfile.TarError):
        return False


def _extract_tar(archive: Path, dest: Path, budget: _Budget) -> list[str]:
    files, links = [], []
    try:
        with tarfile.open(archive, mode="r:*") as tf:
            for member in tf:  # streaming: never builds the full member list first
                budget.count_entry(member.name)
                name = _normalise(member.name)
                if member.isdir():
                    (dest / name).mkdir(parents=True, exist_ok=True)
                    _check_inside(dest / name, dest, name)
                elif member.issym():
                    links.append(_Entry(name, "link", _link_target(name, member.linkname, True)))
                elif member.islnk():
                    links.append(_Entry(name, "link", _link_target(name, member.linkname, False)))
                elif member.isreg():
                    budget.count_bytes(name, member.size, 0)
                    stream = tf.extractfile(member)
                    _write_stream(stream, dest, _Entry(name, "file"), budget)
                    files.append(name)
                else:
                    raise InvalidArgument.for_field(f"bundle[{name}]", "special file in archive")
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument.for_field("bundle", f"corrupt tar archive: {exc}") from None
    return files + _materialise_links(links, dest, budget)


def remove_tree(path: str | os.PathLike) -> None:
    shutil.rmtree(path, ignore_errors=True)
