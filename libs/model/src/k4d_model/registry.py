"""Versioned model registry in the object store.

Layout: `models/<name>/<version>/<file>` for every file of a k4d-layout model directory,
plus `models/<name>/<version>/manifest.json` listing each file's path, size and sha256.
A version is immutable: publishing over an existing version is refused. Fetching
verifies every file against the manifest and caches the directory locally.

References: `registry:<name>/<version>` (or `registry:<name>` for the newest version).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from k4d.errors import FailedPrecondition, InvalidArgument, NotFound
from k4d.tensor_io import sha256_bytes, sha256_file

from k4d_model import cache_root
from k4d_model.checkpoints import K4D_MODEL_FILE

PREFIX = "models"
MANIFEST = "manifest.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _check_name(field: str, value: str) -> str:
    if not _NAME.match(value or ""):
        raise InvalidArgument.for_field(field, f"{value!r} must match {_NAME.pattern}")
    return value


def build_manifest(model_dir: Path, name: str, version: str) -> dict:
    files = []
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(model_dir).as_posix()
        files.append({"path": rel, "size_bytes": path.stat().st_size, "sha256": sha256_file(path)})
    return {"name": name, "version": version, "format": "k4d-generator-model",
            "created_unix": time.time(), "files": files}


def publish(store, model_dir: str | Path, name: str, version: str, *, bus=None) -> dict:
    """Upload a k4d-layout model directory as `models/<name>/<version>/`; returns the manifest.

    With `bus`, the version is announced on `k4d.model.published` once its manifest is
    stored (running generators serving `name` switch to it between jobs)."""
    model_dir = Path(model_dir)
    _check_name("name", name)
    _check_name("version", version)
    if not (model_dir / K4D_MODEL_FILE).exists():
        raise InvalidArgument.for_field("model_dir", f"{model_dir} is not a k4d model directory")
    prefix = f"{PREFIX}/{name}/{version}"
    if store.exists(f"{prefix}/{MANIFEST}"):
        raise FailedPrecondition(f"model {name} version {version} already exists; versions are "
                                 "immutable")
    manifest = build_manifest(model_dir, name, version)
    for entry in manifest["files"]:
        store.put_file(f"{prefix}/{entry['path']}", model_dir / entry["path"])
    # The manifest goes last: a version is visible only once all its files are stored.
    manifest_bytes = json.dumps(manifest, indent=2).encode()
    store.put_bytes(f"{prefix}/{MANIFEST}", manifest_bytes, content_type="application/json")
    if bus is not None:
        from k4d.model_events import announce_model_published

        variant = json.loads((model_dir / K4D_MODEL_FILE).read_text()).get("variant", "")
        announce_model_published(bus, name, version, store.uri_for(prefix),
                                 manifest_sha256=sha256_bytes(manifest_bytes),
                                 variant=str(variant))
    return manifest


def list_versions(store) -> dict[str, list[tuple[str, bytes]]]:
    """{name: [(version, manifest bytes), oldest first]} of published (manifest present)
    models: one listing and one read per version."""
    models: dict[str, list[tuple[float, str, bytes]]] = {}
    for key in store.list(f"{PREFIX}/"):
        parts = key.split("/")
        if len(parts) == 4 and parts[3] == MANIFEST:
            raw = store.get_bytes(key)
            models.setdefault(parts[1], []).append((json.loads(raw)["created_unix"], parts[2],
                                                    raw))
    return {name: [(v, raw) for _, v, raw in sorted(vs)] for name, vs in sorted(models.items())}


def list_models(store) -> dict[str, list[str]]:
    """{name: [versions, oldest first]} of published (manifest present) models."""
    return {name: [v for v, _ in vs] for name, vs in list_versions(store).items()}


def read_manifest_bytes(store, name: str, version: str) -> bytes:
    key = f"{PREFIX}/{name}/{version}/{MANIFEST}"
    if not store.exists(key):
        raise NotFound(f"model {name} version {version} not found in the registry")
    return store.get_bytes(key)


def read_manifest(store, name: str, version: str) -> dict:
    return json.loads(read_manifest_bytes(store, name, version))


def fetch(store, name: str, version: str | None, cache_dir: str | Path) -> Path:
    """Download (or reuse a verified cached copy of) a model version; returns its local dir.

    A cached file is re-hashed only when its size or modification time differs from the
    stamp written when it was last verified: a 14B model is ~60 GB, and hashing it on
    every load (restart, hot reload) would cost minutes.
    """
    if version is None:
        versions = list_models(store).get(name)
        if not versions:
            raise NotFound(f"model {name} not found in the registry")
        version = versions[-1]
    manifest = read_manifest(store, name, version)
    local = Path(cache_dir) / "registry" / name / version
    stamps = _read_stamps(local)
    for entry in manifest["files"]:
        target = local / entry["path"]
        if not _is_verified(target, entry, stamps.get(entry["path"])):
            target.parent.mkdir(parents=True, exist_ok=True)
            store.get_file(f"{PREFIX}/{name}/{version}/{entry['path']}", target,
                           expected_sha256=entry["sha256"])
        stamps[entry["path"]] = _stamp(target, entry["sha256"])
    meta_path = local / K4D_MODEL_FILE
    meta = json.loads(meta_path.read_text())
    meta.update(name=name, version=version)
    meta_path.write_text(json.dumps(meta, indent=2))
    stamps.pop(K4D_MODEL_FILE, None)  # rewritten above: no longer the manifest's bytes
    (local / VERIFIED_STAMPS).write_text(json.dumps(stamps))
    return local


VERIFIED_STAMPS = ".verified.json"


def _stamp(path: Path, sha256: str) -> list:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, sha256]


def _read_stamps(local: Path) -> dict:
    try:
        stamps = json.loads((local / VERIFIED_STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _is_verified(target: Path, entry: dict, stamp) -> bool:
    """The cached file has the manifest's bytes: by its stamp, else by hashing it."""
    if not target.is_file() or target.stat().st_size != entry["size_bytes"]:
        return False
    if stamp == _stamp(target, entry["sha256"]):
        return True
    return sha256_file(target) == entry["sha256"]


def is_registry_ref(ref: str) -> bool:
    return ref.startswith("registry:")


def parse_registry_ref(ref: str) -> tuple[str, str | None]:
    body = ref[len("registry:"):]
    name, _, version = body.partition("/")
    return _check_name("model", name), (_check_name("version", version) if version else None)


def resolve_registry_ref(ref: str, store=None, cache_dir: str | Path | None = None) -> Path:
    """`registry:name[/version]` -> local model directory (store default: K4D_STORE_URI)."""
    if store is None:
        from k4d.store import open_store

        store = open_store()
    name, version = parse_registry_ref(ref)
    cache = cache_root(cache_dir)
    return fetch(store, name, version, cache)
