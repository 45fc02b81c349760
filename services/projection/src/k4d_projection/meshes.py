"""Link meshes for rendering: every geometry of a link merged into one triangle soup
in the LINK frame, with a colour per triangle.

Input is the kinematics package's `LinkGeometry` list (duck-typed: link_index,
mesh_path | primitive + size, T_link_from_geom, scale, rgba), so tests can pose
their own primitives without a URDF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import trimesh
from k4d.errors import InvalidArgument, NotFound

DEFAULT_RGB = np.array([0.7, 0.7, 0.7], np.float32)
_PRIMITIVE_SECTIONS = 64


@dataclass(frozen=True)
class LinkMesh:
    """All triangles of one link in its own frame.

    vertices: (N, 3) float32, link frame; faces: (F, 3) uint32;
    face_normals: (F, 3) float32 unit, link frame; face_rgb: (F, 3) float32 in [0, 1];
    hull_vertices: (K, 3) float64, vertices of the convex hull (used to cull rays).
    """

    link_index: int
    vertices: np.ndarray
    faces: np.ndarray
    face_normals: np.ndarray
    face_rgb: np.ndarray
    hull_vertices: np.ndarray


def build_link_meshes(geometries, num_links: int) -> list[LinkMesh]:
    """Group `geometries` (LinkGeometry-like) by link and merge them; links without
    geometry are omitted. Returns LinkMesh list sorted by link index."""
    by_link: dict[int, list[trimesh.Trimesh]] = {}
    for i, geom in enumerate(geometries):
        if not 0 <= geom.link_index < num_links:
            raise InvalidArgument.for_field(f"geometries[{i}].link_index",
                                            f"{geom.link_index} outside [0, {num_links})")
        for mesh in _geometry_meshes(geom, f"geometries[{i}]"):
            by_link.setdefault(geom.link_index, []).append(mesh)
    return [_merge(link, meshes) for link, meshes in sorted(by_link.items())]


def _geometry_meshes(geom, field: str) -> list[trimesh.Trimesh]:
    """Meshes of one geometry, in the link frame, each with `face_rgb` in metadata."""
    urdf_rgb = _urdf_rgb(geom)
    if getattr(geom, "mesh_path", None):
        parts = load_mesh_file(geom.mesh_path, field)
    elif getattr(geom, "primitive", None):
        parts = [_primitive(geom.primitive, geom.size, field)]
    else:
        return []
    scale = np.asarray(getattr(geom, "scale", None) if getattr(geom, "scale", None) is not None
                       else (1.0, 1.0, 1.0), np.float64)
    T_link_from_geom = np.asarray(geom.T_link_from_geom, np.float64)
    out = []
    for part in parts:
        rgb = _mesh_face_rgb(part)
        if rgb is None:
            rgb = np.broadcast_to(urdf_rgb, (len(part.faces), 3))
        vertices = (part.vertices * scale) @ T_link_from_geom[:3, :3].T + T_link_from_geom[:3, 3]
        faces = np.asarray(part.faces)
        if np.linalg.det(np.diag(scale)) < 0:  # a mirroring scale flips the winding
            faces = faces[:, ::-1]
        mesh = trimesh.Trimesh(vertices=vertices, faces=faces, process=False)
        mesh.metadata["face_rgb"] = np.asarray(rgb, np.float32)
        out.append(mesh)
    return out


def load_mesh_file(path: str, field: str = "mesh_path") -> list[trimesh.Trimesh]:
    """Load .stl/.obj/.dae (any trimesh format) as a list of triangle meshes with the
    file's scene-graph transforms and COLLADA unit applied; visuals are kept."""
    p = Path(path)
    if not p.is_file():
        raise NotFound(f"{field}: mesh file not found: {path}")
    try:
        loaded = trimesh.load(str(p), force="scene")
    except Exception as exc:  # trimesh raises many types for broken files
        raise InvalidArgument.for_field(field, f"cannot read mesh {path}: {exc}") from None
    parts = [m for m in loaded.dump() if isinstance(m, trimesh.Trimesh) and len(m.faces)]
    if not parts:
        raise InvalidArgument.for_field(field, f"mesh {path} contains no triangles")
    unit = _unit_scale(loaded.metadata.get("units") if loaded.metadata else None)
    if unit != 1.0:
        for m in parts:
            m.vertices = m.vertices * unit
    return parts


def _unit_scale(units) -> float:
    """COLLADA `<unit meter="0.001">` arrives from trimesh as '0.001 * meters'."""
    if not units or units in ("meters", "meter", "m"):
        return 1.0
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*\*\s*meters?\s*", str(units))
    if match:
        return float(match.group(1))
    return {"millimeters": 1e-3, "mm": 1e-3, "centimeters": 1e-2, "cm": 1e-2,
            "inches": 0.0254}.get(str(units), 1.0)


def _primitive(kind: str, size, field: str) -> trimesh.Trimesh:
    size = tuple(float(s) for s in size)
    if kind == "box" and len(size) == 3:
        return trimesh.creation.box(extents=size)
    if kind == "cylinder" and len(size) == 2:
        return trimesh.creation.cylinder(radius=size[0], height=size[1],
                                         sections=_PRIMITIVE_SECTIONS)
    if kind == "sphere" and len(size) == 1:
        return trimesh.creation.icosphere(subdivisions=4, radius=size[0])
    raise InvalidArgument.for_field(f"{field}.primitive", f"unsupported primitive {kind!r} "
                                    f"with size {size}")


def _urdf_rgb(geom) -> np.ndarray:
    rgba = getattr(geom, "rgba", None)
    if rgba is None:
        return DEFAULT_RGB
    rgba = np.asarray(rgba, np.float32).reshape(-1)
    return rgba[:3] if rgba.size >= 3 else DEFAULT_RGB


def _mesh_face_rgb(mesh: trimesh.Trimesh) -> np.ndarray | None:
    """Colours the mesh file itself defines (COLLADA/OBJ materials, PLY colours), per
    face in [0, 1]; None when the file has none (then the URDF colour applies)."""
    visual = mesh.visual
    kind = getattr(visual, "kind", None)
    if kind == "texture":
        material = getattr(visual, "material", None)
        image = getattr(material, "image", None) or getattr(material, "baseColorTexture", None)
        if image is not None and getattr(visual, "uv", None) is not None:
            vertex_rgb = visual.to_color().vertex_colors[:, :3].astype(np.float32) / 255.0
            return vertex_rgb[mesh.faces].mean(axis=1)
        if material is not None and hasattr(material, "main_color"):
            rgb = np.asarray(material.main_color[:3], np.float32) / 255.0
            return np.broadcast_to(rgb, (len(mesh.faces), 3))
        return None
    if kind == "face":
        return visual.face_colors[:, :3].astype(np.float32) / 255.0
    if kind == "vertex":
        return visual.vertex_colors[mesh.faces][:, :, :3].mean(axis=1).astype(np.float32) / 255.0
    return None


def _merge(link_index: int, meshes: list[trimesh.Trimesh]) -> LinkMesh:
    offsets = np.cumsum([0] + [len(m.vertices) for m in meshes[:-1]])
    vertices = np.concatenate([m.vertices for m in meshes]).astype(np.float64)
    faces = np.concatenate([np.asarray(m.faces) + o for m, o in zip(meshes, offsets, strict=True)])
    face_rgb = np.concatenate([m.metadata["face_rgb"] for m in meshes]).astype(np.float32)
    merged = trimesh.Trimesh(vertices=vertices, faces=faces, process=False)
    normals = np.asarray(merged.face_normals, np.float32)
    try:
        hull = np.asarray(merged.convex_hull.vertices, np.float64)
    except Exception:  # degenerate (flat) geometry: qhull fails; the vertices bound it too
        hull = vertices
    return LinkMesh(link_index=link_index, vertices=vertices.astype(np.float32),
                    faces=faces.astype(np.uint32), face_normals=normals,
                    face_rgb=np.clip(face_rgb, 0.0, 1.0), hull_vertices=hull)
