"""The workspace framing (objects large enough for a world model to see them move) and the
shifted scene distribution of `k4d datagen synthetic --scene-shift`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d_datagen.engine import EpisodeConfig, episode_rng, generate_episode
from k4d_tabletop.scene import SceneShift, sample_scene


def _scene(framing="wide", shift=None, index=0):
    return sample_scene(episode_rng(5, index), "pick", 144, 96, framing, shift)


def test_scene_shift_scales_the_same_scene():
    base, shifted = _scene(), _scene(shift=SceneShift(objects=1.25, camera=0.75))
    for a, b in zip(base.objects, shifted.objects, strict=True):
        np.testing.assert_allclose(np.array(b.half_size), 1.25 * np.array(a.half_size))
        assert (a.xy, a.colour, a.shape) == (b.xy, b.colour, b.shape)
    target = np.array(base.camera.target)
    assert base.camera.target == shifted.camera.target
    assert math.dist(shifted.camera.eye, target) == pytest.approx(0.75 * math.dist(base.camera.eye, target))
    assert (base.table_rgb, base.light_dir) == (shifted.table_rgb, shifted.light_dir)


def test_scene_shift_parses_and_names_what_is_wrong():
    assert SceneShift.parse("objects=1.25,camera=0.75") == SceneShift(1.25, 0.75)
    assert SceneShift.parse("camera=0.8") == SceneShift(1.0, 0.8)
    assert SceneShift.parse("").is_identity
    for text in ("objects", "objects=0.1", "colour=2", "camera=nan"):
        with pytest.raises(InvalidArgument, match="--scene-shift"):
            SceneShift.parse(text)


def test_workspace_framing_keeps_the_rest_of_the_scene():
    """Only the camera differs: the same objects, table and lights."""
    wide, close = _scene("wide"), _scene("workspace")
    assert [o.xy for o in wide.objects] == [o.xy for o in close.objects]
    assert (wide.table_rgb, wide.floor_rgb) == (close.table_rgb, close.floor_rgb)
    assert math.dist(close.camera.eye, close.camera.target) < 0.8 < math.dist(wide.camera.eye, wide.camera.target)


def _object_extents_px(object_ids: np.ndarray) -> list[int]:
    """Each object's extent in pixels, for objects whole in the image (not cut by its border)."""
    height, width = object_ids.shape
    extents = []
    for k in np.unique(object_ids):
        if k >= 1:
            rows, cols = np.where(object_ids == k)
            if rows.min() > 0 and cols.min() > 0 and rows.max() < height - 1 and cols.max() < width - 1:
                extents.append(max(np.ptp(rows), np.ptp(cols)) + 1)
    return extents


@pytest.mark.parametrize("index", [0, 1])
def test_workspace_objects_are_at_least_12_px_across_at_96x144(index):
    config = EpisodeConfig(index=index, seed=4242, task="mix", frames=3, height=96, width=144,
                           framing="workspace")
    meta, arrays = generate_episode(config)
    extents = _object_extents_px(arrays["object_ids"][0])
    assert extents and min(extents) >= 12, extents
    assert arrays["robot_mask"].any(axis=(1, 2)).any(), "the arm must be seen"
    assert meta.source["framing"] == "workspace" and meta.source["scene_shift"] == "objects=1,camera=1"
