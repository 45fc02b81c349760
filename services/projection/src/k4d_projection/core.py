"""The projection stage core: link poses + camera -> the robot condition the generator
takes (depth, pointmap, mask, link_id, shaded rgb), and the built renderers a process
keeps per robot.

Pure numpy, no store or bus: the stage worker (decode the event -> `robot_condition` ->
store the arrays), the embedded runner and the data engine call it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from k4d.camera import Camera

from k4d_projection.renderer import (
    CONDITION_OUTPUTS,
    DEFAULT_MEMORY_BUDGET_BYTES,
    RenderResult,
    RenderWorkspace,
    RobotRenderer,
)


class RendererCache:
    """Built `RobotRenderer`s (meshes + acceleration structures) per robot and geometry
    set, least recently used first out. Thread-safe."""

    def __init__(self, capacity: int = 8, engine: str = "open3d"):
        self.capacity, self.engine = capacity, engine
        self._items: OrderedDict[tuple, RobotRenderer] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, model, collision: bool) -> RobotRenderer:
        key = (model.name, model.source, id(model), collision)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        renderer = RobotRenderer.from_robot(model, collision=collision, engine=self.engine)
        with self._lock:
            self._items[key] = renderer
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return renderer


def robot_condition(renderer: RobotRenderer, poses: np.ndarray, camera: Camera, *,
                    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
                    workspace: RenderWorkspace | None = None) -> RenderResult:
    """poses (T, L, 4, 4) T_base_from_link -> the robot condition (CONDITION_OUTPUTS),
    pixel-aligned with the camera's image. With a `workspace` the arrays are views into
    it, valid until its next render (a worker that stores them at once reuses buffers)."""
    return renderer.render(poses, camera, outputs=CONDITION_OUTPUTS,
                           memory_budget_bytes=memory_budget_bytes, workspace=workspace)
