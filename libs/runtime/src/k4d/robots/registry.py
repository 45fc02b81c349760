"""User robot bundles in the object store.

`k4d robots register BUNDLE` (or gRPC RegisterRobot) validates a zip/tar of URDF + meshes
by extracting it safely and building the model, then stores it:

    robots/<name>/bundle         the archive bytes as uploaded
    robots/<name>/manifest.json  {"name", "urdf", "ee_link", "gripper_joints", "bundle_sha256"}

Loading extracts the bundle once into a local cache directory keyed by its sha256.
A bundle may carry `robot.json` at its root ({"urdf": "path/in/bundle.urdf", "name":
..., "ee_link": ..., "gripper_joints": [...]}); without it, the bundle must contain
exactly one `.urdf` file. Bundles hold plain URDF only: xacro evaluates Python
expressions and is not run on uploaded files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
import uuid
from pathlib import Path

from k4d.errors import InvalidArgument, NotFound

from .bundles import BundleLimits, remove_tree, safe_extract
from .loader import BUILTIN_ROBOTS, load_robot_file
from .model import RobotModel

ROBOT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
PREFIX = "robots/"


def default_cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"k4d-robot-bundles-{os.getuid()}"


class RobotRegistry:
    def __init__(self, store, cache_dir: str | os.PathLike | None = None,
                 limits: BundleLimits = BundleLimits()):
        self.store = store
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.limits = limits

    def names(self) -> list[str]:
        keys = self.store.list(PREFIX)
        return sorted({k[len(PREFIX):].split("/")[0] for k in keys if k.endswith("/manifest.json")})

    def register(self, bundle: str | os.PathLike, name: str | None = None, *,
                 urdf_path: str | None = None, ee_link: str | None = None) -> RobotModel:
        """Validate and store a bundle; returns the model. Re-registering a name replaces it.
        `urdf_path` / `ee_link` override robot.json and the defaults."""
        bundle = Path(bundle)
        if not bundle.is_file():
            raise InvalidArgument.for_field("bundle", f"no such file: {bundle}")
        data = bundle.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        staging = self.cache_dir / f"staging-{uuid.uuid4().hex}"
        try:
            safe_extract(bundle, staging, self.limits)
            meta = _bundle_manifest(staging, urdf_path)
            if ee_link:
                meta["ee_link"] = ee_link
            robot_name = name or meta.get("name")
            model = self._build(staging, meta, robot_name or "")
            robot_name = robot_name or model.name
            _check_name(robot_name)
            manifest = {"name": robot_name, "urdf": meta["urdf"], "ee_link": model.ee_link,
                        "gripper_joints": model.gripper_joints, "bundle_sha256": sha}
            self.store.put_bytes(f"{PREFIX}{robot_name}/bundle", data)
            self.store.put_bytes(f"{PREFIX}{robot_name}/manifest.json",
                                 json.dumps(manifest, indent=2).encode(), "application/json")
            self._install(staging, sha)
        finally:
            remove_tree(staging)
        return self.load(robot_name)

    def load(self, name: str) -> RobotModel:
        _check_name(name)
        try:
            manifest = json.loads(self.store.get_bytes(f"{PREFIX}{name}/manifest.json"))
        except NotFound:
            raise NotFound(f"unknown robot {name!r}; builtin robots: {', '.join(BUILTIN_ROBOTS)}; "
                           f"registered: {', '.join(self.names()) or 'none'}") from None
        sha = manifest["bundle_sha256"]
        tree = self.cache_dir / sha
        if not tree.is_dir():
            self._fetch(name, sha)
        return _load_cached(str(tree), manifest["urdf"], name, manifest["ee_link"],
                            tuple(manifest["gripper_joints"]))

    def load_bundle(self, key: str, max_bytes: int | None = None) -> RobotModel:
        """A robot straight from a bundle object in the store (RobotRef.bundle_uri)."""
        max_bytes = max_bytes or self.limits.max_total_bytes
        try:
            info = self.store.stat(key)
        except NotFound:
            raise NotFound(f"no robot bundle at {key!r}") from None
        if info.size_bytes > max_bytes:
            raise InvalidArgument.for_field("robot.bundle_uri", f"bundle larger than {max_bytes} bytes")
        # The store records every object's sha256: a bundle extracted before is not fetched
        # and hashed again on each request that names it.
        sha = info.sha256 if SHA256_HEX.fullmatch(info.sha256 or "") else ""
        tree = self.cache_dir / sha if sha else None
        if tree is None or not tree.is_dir():
            data = self.store.get_bytes(key)  # verified against the recorded sha256
            sha = hashlib.sha256(data).hexdigest()
            tree = self.cache_dir / sha
            if not tree.is_dir():
                self._extract_bytes(data, sha)
        meta = _bundle_manifest(tree)
        name = meta.get("name") or f"bundle-{sha[:12]}"
        return _load_cached(str(tree), meta["urdf"], name, meta.get("ee_link"),
                            tuple(meta["gripper_joints"]) if meta.get("gripper_joints") else None)

    # -------------------------------------------------------------- helpers

    def _build(self, tree: Path, meta: dict, name: str) -> RobotModel:
        return load_robot_file(tree / meta["urdf"], tree_root=tree, name=name or None,
                               source=f"store:{name}", ee_link=meta.get("ee_link"),
                               gripper_joints=meta.get("gripper_joints"), allow_xacro=False)

    def _extract_bytes(self, data: bytes, sha: str) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self.cache_dir, suffix=".bundle") as handle:
            handle.write(data)
            handle.flush()
            self._extract(handle.name, sha)

    def _fetch(self, name: str, sha: str) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self.cache_dir, suffix=".bundle") as handle:
            self.store.get_file(f"{PREFIX}{name}/bundle", handle.name, expected_sha256=sha)
            self._extract(handle.name, sha)

    def _extract(self, archive: str, sha: str) -> None:
        """Extract into a staging directory, then install it as the cache entry `sha`."""
        staging = self.cache_dir / f"staging-{uuid.uuid4().hex}"
        try:
            safe_extract(archive, staging, self.limits)
            self._install(staging, sha)
        finally:
            remove_tree(staging)

    def _install(self, staging: Path, sha: str) -> None:
        target = self.cache_dir / sha
        if target.is_dir():
            return
        try:
            staging.rename(target)  # atomic: concurrent loaders see all or nothing
        except OSError:
            if not target.is_dir():
                raise


@functools.lru_cache(maxsize=32)
def _load_cached(tree: str, urdf: str, name: str, ee_link: str | None,
                 gripper_joints: tuple | None) -> RobotModel:
    root = Path(tree)
    return load_robot_file(root / urdf, tree_root=root, name=name, source=f"store:{name}",
                           ee_link=ee_link, allow_xacro=False,
                           gripper_joints=None if gripper_joints is None else list(gripper_joints))


def _bundle_manifest(tree: Path, urdf_path: str | None = None) -> dict:
    manifest_path = tree / "robot.json"
    if urdf_path:
        meta = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
        meta = meta if isinstance(meta, dict) else {}
        meta["urdf"] = urdf_path
        return _check_urdf_path(tree, meta, "urdf_path")
    if manifest_path.is_file():
        try:
            meta = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidArgument.for_field("bundle.robot.json", f"invalid JSON: {exc}") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("urdf"), str):
            raise InvalidArgument.for_field("bundle.robot.json", 'needs {"urdf": "path.urdf"}')
        return _check_urdf_path(tree, meta, "bundle.robot.json.urdf")
    urdfs = sorted(str(p.relative_to(tree)) for p in tree.rglob("*.urdf"))
    if len(urdfs) != 1:
        raise InvalidArgument.for_field(
            "bundle", f"expected exactly one .urdf file (or a robot.json naming it), found "
                      f"{len(urdfs)}: {urdfs[:5]}")
    return {"urdf": urdfs[0]}


def _check_urdf_path(tree: Path, meta: dict, field: str) -> dict:
    urdf = meta["urdf"]
    if urdf.endswith(".xacro"):
        raise InvalidArgument.for_field(field, "bundles must hold plain URDF (expand xacro first)")
    if not (tree / urdf).resolve().is_relative_to(tree.resolve()):
        raise InvalidArgument.for_field(field, "path escapes the bundle")
    if not (tree / urdf).is_file():
        raise InvalidArgument.for_field(field, f"{urdf!r} is not a file in the bundle")
    return meta


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not ROBOT_NAME.match(name):
        raise InvalidArgument.for_field("name", f"robot name {name!r} must match {ROBOT_NAME.pattern}")
    if name in BUILTIN_ROBOTS:
        raise InvalidArgument.for_field("name", f"{name!r} is a builtin robot name")
