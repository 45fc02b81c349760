"""k4d_model.surface: the surface's colours, what is unlike them, and the footprint of an
object an estimate laid flat."""

from __future__ import annotations

import numpy as np
import pytest
from k4d_model.surface import FOOTPRINT_PAD_M, flat_footprint, surface_palette, unlike_surface

PINK, GREEN = np.array([200.0, 170.0, 190.0]), np.array([70.0, 100.0, 90.0])


def _checkerboard(size=48, check=8):
    v, u = np.mgrid[0:size, 0:size]
    first = ((v // check + u // check) % 2 == 0)[..., None]
    return np.where(first, PINK, GREEN)


def test_the_palette_of_a_checkerboard_is_its_two_colours():
    image = _checkerboard()
    image[20:24, 20:24] = (230, 200, 40)  # a small yellow object: < PALETTE_SHARE of it
    palette = surface_palette(image, np.ones(image.shape[:2], bool))
    assert len(palette) == 2
    assert min(np.linalg.norm(palette - PINK, axis=1)) < 1 and min(
        np.linalg.norm(palette - GREEN, axis=1)) < 1


@pytest.mark.parametrize("colour, unlike", [
    ((230, 200, 40), True),          # yellow object
    ((15, 15, 15), True),            # black object: darker than any shadow of the checks
    (tuple(PINK * 0.6), False),      # the robot's shadow on a pink check
    (tuple(PINK * 1.1), False),      # a highlight
    (tuple((PINK + GREEN) / 2), False),  # the anti-aliased edge between two checks
])
def test_unlike_surface(colour, unlike):
    pixel = np.asarray(colour, np.float64).reshape(1, 1, 3)
    assert bool(unlike_surface(pixel, np.stack([PINK, GREEN]))[0, 0]) is unlike


def test_an_object_laid_flat_stands_at_its_near_edge():
    """A 4 cm cube at x = 0.5 seen from the origin: laid flat, its points stretch 5 cm away
    from the camera; its footprint is its width across the view, at its near edge."""
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0.48, 0.57, 2000), rng.uniform(-0.02, 0.02, 2000)
    centre, radius = flat_footprint(np.stack([x, y], axis=1), np.zeros(2))
    assert radius == pytest.approx(0.016 + FOOTPRINT_PAD_M, abs=2e-3)  # 10th-90th pct
    assert centre[0] == pytest.approx(0.489 + radius, abs=2e-3) and abs(centre[1]) < 2e-3
