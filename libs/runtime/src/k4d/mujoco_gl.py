"""Headless MuJoCo rendering support shared by the data engine (synthetic scenes,
`k4d_tabletop.physics.SceneCamera`) and the projection cross-checks
(`k4d_projection.testing.mujoco_reference`): importing mujoco with an off-screen GL
backend, the off-screen GL and render contexts (`OffscreenContext`), and reading its
depth buffer back in metres.

MuJoCo is optional (`pip install mujoco` plus Debian `libosmesa6` for OSMesa); the import
happens only when `import_mujoco` is called, and a missing package is FailedPrecondition
naming what to install. MUJOCO_GL must be chosen before mujoco is first imported:
`import_mujoco` sets `osmesa` unless the environment chose another backend (egl, glfw).
"""

from __future__ import annotations

import os

import numpy as np

from k4d.errors import FailedPrecondition


def import_mujoco():
    """Import mujoco with a headless GL backend (osmesa unless MUJOCO_GL says otherwise)."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    if os.environ["MUJOCO_GL"] == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    try:
        import mujoco
    except ImportError as exc:
        raise FailedPrecondition(f"MuJoCo rendering needs `pip install mujoco` ({exc})") from None
    return mujoco


def linearize_depth(window_depth: np.ndarray, znear: float, zfar: float,
                    zero_far: bool) -> tuple[np.ndarray, np.ndarray]:
    """Window depth from `mjr_readPixels` -> (metres along the optical axis (float64),
    hit mask). MuJoCo reports which mapping it read back in `MjrContext.readDepthMap`:
    standard (mjDEPTH_ZERONEAR, d = f (z - n) / (z (f - n)), so z = n f / (f - d (f - n)))
    or reversed (mjDEPTH_ZEROFAR, d = n (f - z) / (z (f - n)), so
    z = n f / (n + d (f - n))). Pixels at the far plane (background) are not hits."""
    d = np.asarray(window_depth, np.float64)
    if zero_far:
        return znear * zfar / (znear + d * (zfar - znear)), d > 0.0
    return znear * zfar / (zfar - d * (zfar - znear)), d < 1.0


class OffscreenContext:
    """The off-screen GL context and MuJoCo render context of one model at width x height:
    `render(scene)` draws an updated MjvScene, `read(rgb, depth)` reads the buffers back
    (rows bottom up, as OpenGL stores them), `metres(window_depth, znear, zfar)`
    linearises a depth read-back. The model's offscreen buffer (visual.global.offwidth /
    offheight) must be at least width x height. `close()` frees both contexts."""

    def __init__(self, mujoco, model, width: int, height: int):
        self.mujoco = mujoco
        self._gl = mujoco.GLContext(width, height)
        self._gl.make_current()
        self._context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self.viewport = mujoco.MjrRect(0, 0, width, height)
        # Which depth mapping the read-back uses (MuJoCo picks reversed Z where it can).
        self.zero_far = self._context.readDepthMap == mujoco.mjtDepthMap.mjDEPTH_ZEROFAR

    def render(self, scene) -> None:
        self.mujoco.mjr_render(self.viewport, scene, self._context)

    def read(self, rgb: np.ndarray | None, depth: np.ndarray | None) -> None:
        self.mujoco.mjr_readPixels(rgb, depth, self.viewport, self._context)

    def metres(self, window_depth: np.ndarray, znear: float, zfar: float
               ) -> tuple[np.ndarray, np.ndarray]:
        return linearize_depth(window_depth, znear, zfar, self.zero_far)

    def close(self) -> None:
        if self._context is not None:
            self._context.free()
            self._context = None
        if self._gl is not None:
            self._gl.free()
            self._gl = None
