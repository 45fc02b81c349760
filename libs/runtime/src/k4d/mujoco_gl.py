"""Headless MuJoCo rendering support shared by the data engine (synthetic scenes) and the
projection cross-checks: importing mujoco with an off-screen GL backend, and reading its
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
