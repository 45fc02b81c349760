"""Ray-casting back-ends. Each holds one link's triangles in the LINK frame with its
acceleration structure built once; `cast(rays)` returns the first hit per ray.

`open3d` (default): Open3D `RaycastingScene` (Embree 4 underneath).
`embree`: trimesh + embreex, selected explicitly where Open3D cannot be imported.
"""

from __future__ import annotations

import functools

import numpy as np
from k4d.errors import FailedPrecondition, InvalidArgument

ENGINES = ("open3d", "embree")


@functools.cache
def is_open3d_available() -> bool:
    try:
        import open3d  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


@functools.cache
def is_embree_available() -> bool:
    try:
        import embreex  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def make_link_scene(engine: str, vertices: np.ndarray, faces: np.ndarray):
    """vertices (N, 3) float32, faces (F, 3) uint32 -> a scene with `cast(rays)`."""
    if engine == "open3d":
        if not is_open3d_available():
            raise FailedPrecondition("ray-casting engine 'open3d' is not importable: install "
                                     "open3d-cpu (and libusb-1.0-0 on Debian) or use "
                                     "engine='embree'")
        return Open3DLinkScene(vertices, faces)
    if engine == "embree":
        if not is_embree_available():
            raise FailedPrecondition("ray-casting engine 'embree' needs `pip install embreex`")
        return EmbreeLinkScene(vertices, faces)
    raise InvalidArgument.for_field("engine", f"unknown engine {engine!r}; one of {ENGINES}")


class Open3DLinkScene:
    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        import open3d as o3d

        self._o3c = o3d.core
        self._scene = o3d.t.geometry.RaycastingScene()
        self._scene.add_triangles(o3d.core.Tensor(np.ascontiguousarray(vertices, np.float32)),
                                  o3d.core.Tensor(np.ascontiguousarray(faces, np.uint32)))
        # The BVH is built lazily by the first query; build it now so the scene is
        # immutable (and safe to share between threads) from here on.
        self.cast(np.array([[0, 0, 0, 0, 0, 1]], np.float32))

    def cast(self, rays: np.ndarray, t_max: np.ndarray | None = None):
        """rays (N, 6) float32 [origin, direction] -> (t_hit (N,) float32, inf on miss;
        primitive id (N,) int64). t is in units of the direction's length. Open3D has no
        per-ray far limit, so `t_max` is ignored (the caller's z-test still applies)."""
        result = self._scene.cast_rays(self._o3c.Tensor.from_numpy(rays), nthreads=0)
        return result["t_hit"].numpy(), result["primitive_ids"].numpy().astype(np.int64)


class EmbreeLinkScene:
    """embreex (Embree) directly: one scene per link, first-hit distance and triangle id."""

    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        from embreex import rtcore_scene
        from embreex.mesh_construction import TriangleMesh

        self._scene = rtcore_scene.EmbreeScene()
        TriangleMesh(scene=self._scene, vertices=np.ascontiguousarray(vertices, np.float32),
                     indices=np.ascontiguousarray(faces, np.int32))

    def cast(self, rays: np.ndarray, t_max: np.ndarray | None = None):
        """As Open3DLinkScene.cast; `t_max` (N,) ends each ray there (Embree's tfar), so
        rays already hit nearer by another link stop traversing early."""
        origins = np.ascontiguousarray(rays[:, :3], np.float32)
        directions = np.ascontiguousarray(rays[:, 3:], np.float32)
        dists = None if t_max is None else np.ascontiguousarray(
            np.minimum(t_max, np.float32(3.0e38)), np.float32)
        out = self._scene.run(origins, directions, dists=dists, output=True)
        prim = np.asarray(out["primID"]).astype(np.int64)
        t_hit = np.asarray(out["tfar"], np.float32).copy()
        t_hit[prim < 0] = np.inf
        return t_hit, prim
