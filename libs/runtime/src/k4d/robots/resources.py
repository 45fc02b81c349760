"""Files behind a robot description: reading URDF/xacro, resolving mesh URIs.

Mesh URIs are resolved inside a *tree root* (the robot's own directory tree):
relative paths against the URDF's directory, `package://PKG/rest` against the
nearest ancestor directory named PKG (or containing PKG) below the tree root,
and `file://` paths. A resolved path that leaves the tree root, does not exist
or is not a supported mesh format is rejected with InvalidArgument.
"""

from __future__ import annotations

import os
from pathlib import Path

from k4d.errors import InvalidArgument

MESH_SUFFIXES = (".stl", ".obj", ".dae")
URDF_SUFFIXES = (".urdf",)
XACRO_SUFFIXES = (".xacro",)


def read_description(path: Path, xacro_args: dict[str, str] | None = None) -> str:
    """URDF text of `path`; `.xacro` files are expanded with the PyPI `xacro` package."""
    if not path.is_file():
        raise InvalidArgument.for_field("robot", f"no such URDF/xacro file: {path}")
    if path.name.endswith(XACRO_SUFFIXES):
        return expand_xacro(path, xacro_args or {})
    return path.read_text(encoding="utf-8", errors="replace")


def expand_xacro(path: Path, mappings: dict[str, str]) -> str:
    """Expand a xacro file to URDF text. Only for trusted local files: xacro evaluates
    `${...}` Python expressions, so uploaded bundles are restricted to plain URDF."""
    try:
        import xacro
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise InvalidArgument.for_field("robot", "xacro files need `pip install xacro`") from exc
    try:
        doc = xacro.process_file(str(path), mappings=dict(mappings))
    except Exception as exc:  # xacro raises bare XacroException / ParseError / NameError
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidArgument.for_field("robot", f"xacro expansion of {path.name} failed: "
                                        f"{message}") from None
    return doc.toxml()


def resolve_mesh(uri: str, urdf_dir: Path, tree_root: Path, where: str) -> str:
    """Absolute path of the mesh file `uri` referenced from a URDF in `urdf_dir`."""
    tree_root = tree_root.resolve()
    if uri.startswith("package://"):
        package, _, rest = uri[len("package://"):].partition("/")
        candidates = _package_candidates(package, rest, urdf_dir.resolve(), tree_root)
    elif uri.startswith("file://"):
        candidates = [Path(uri[len("file://"):])]
    elif "://" in uri:
        raise InvalidArgument.for_field(where, f"unsupported mesh URI scheme: {uri!r}")
    else:
        candidates = [urdf_dir / uri]
    for candidate in candidates:
        resolved = candidate.resolve()
        if not _is_within(resolved, tree_root):
            raise InvalidArgument.for_field(where, f"mesh {uri!r} resolves outside the robot tree")
        if resolved.is_file():
            if not resolved.name.lower().endswith(MESH_SUFFIXES):
                raise InvalidArgument.for_field(
                    where, f"unsupported mesh format {resolved.suffix!r} (expected .stl/.obj/.dae)")
            return str(resolved)
    raise InvalidArgument.for_field(where, f"missing mesh file {uri!r}")


def _package_candidates(package: str, rest: str, start: Path, tree_root: Path) -> list[Path]:
    """Directories that may stand for `package://package`, nearest ancestor first."""
    candidates = []
    for ancestor in [start, *start.parents]:
        if ancestor.name == package:
            candidates.append(ancestor / rest)
        if (ancestor / package).is_dir():
            candidates.append(ancestor / package / rest)
        if ancestor == tree_root or not _is_within(ancestor, tree_root):
            break
    return candidates


def _is_within(path: Path, root: Path) -> bool:
    try:
        return os.path.commonpath([str(path), str(root)]) == str(root)
    except ValueError:
        return False
