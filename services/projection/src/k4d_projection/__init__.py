"""Kinema4D projection: exact ray-cast robot depth, pointmaps, masks, link ids, normals and
shaded robot renders from link poses and a camera; pointmap codecs."""

from __future__ import annotations

# The public API: what other packages (the composers: the embedded runner, datagen, policy
# evaluation) may import, always as `from k4d_projection import NAME` (tests/contract/
# test_service_imports.py). The rest of the package is internal.
from k4d_projection.core import RendererCache, robot_condition
from k4d_projection.renderer import CONDITION_OUTPUTS, RenderResult, RobotRenderer

__all__ = ["CONDITION_OUTPUTS", "RenderResult", "RendererCache", "RobotRenderer",
           "robot_condition"]
