"""k4d_model.surface: the surface's colours, what is unlike them, the footprint of an
object an estimate laid flat, and the object stood up again."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera
from k4d_model.surface import (
    FOOTPRINT_PAD_M,
    flat_footprint,
    object_pieces,
    silhouette_footprint,
    standing_objects,
    surface_palette,
    unlike_surface,
)

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


CAMERA = Camera(width=96, height=72, fx=90.0, fy=90.0, cx=47.5, cy=35.5)
BOX_AT, BOX_HALF = np.array([0.5, 0.0]), 0.02  # a 4 cm cube on the table (base z = 0)


def _oblique_camera() -> np.ndarray:
    """T_cam_from_base of a camera 0.4 m above the base's origin looking along +x, 45 deg
    down (OpenCV axes: x right, y down, z forward)."""
    forward = np.array([1.0, 0.0, -1.0]) / np.sqrt(2)
    right = np.array([0.0, -1.0, 0.0])
    down = np.cross(forward, right)
    R = np.stack([right, down, forward])
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, -R @ np.array([0.0, 0.0, 0.4])
    return T


def _cube_scene():
    """The image (H, W, 3) of the cube (yellow) on a checkerboard, the estimate that lays it
    flat (every ray's point on the table), the true depth, the cube's pixels and the pose."""
    T = _oblique_camera()
    R_base, eye = T[:3, :3].T, -T[:3, :3].T @ T[:3, 3]
    rays = CAMERA.ray_directions()
    d = rays @ R_base.T  # base-frame direction of each ray, 1 per metre of depth
    flat_depth = -eye[2] / d[..., 2]
    # the true hit: the cube's box (slabs) where the ray meets it, else the table
    lo = np.array([*(BOX_AT - BOX_HALF), 0.0])
    hi = np.array([*(BOX_AT + BOX_HALF), 2 * BOX_HALF])
    with np.errstate(divide="ignore", invalid="ignore"):
        t0, t1 = (lo - eye) / d, (hi - eye) / d
    near = np.minimum(t0, t1).max(axis=-1)
    far = np.maximum(t0, t1).min(axis=-1)
    cube = (near <= far) & (near > 0)
    depth = np.where(cube, near, flat_depth)
    table = eye + flat_depth[..., None] * d
    check = ((np.floor(table[..., 0] / 0.05) + np.floor(table[..., 1] / 0.05)) % 2 == 0)
    image = np.where(check[..., None], PINK, GREEN)
    image[cube] = (230, 200, 40)
    flat = (rays * flat_depth[..., None]).astype(np.float32)
    return image.astype(np.uint8), flat, depth, cube, T


def test_an_object_laid_flat_stands_up_again():
    image, flat, depth, cube, T = _cube_scene()
    pieces = object_pieces(image, np.ones(cube.shape, bool), np.zeros(cube.shape, bool))
    assert pieces.max() == 1 and np.array_equal(pieces > 0, cube)
    out = standing_objects(flat, pieces, T)
    flat_error = np.abs(flat[..., 2] - depth)[cube].mean()
    error = np.abs(out[..., 2] - depth)[cube].mean()
    assert flat_error > 0.03 and error < 0.25 * flat_error
    assert np.array_equal(out[~cube], flat[~cube])  # the table stays where it was
    assert (out[..., 2] <= flat[..., 2] + 1e-6).all()  # nearer, never farther
    # the points stay on their pixels' rays
    ratio = out[cube] / out[cube][:, 2:]
    assert np.allclose(ratio, flat[cube] / flat[cube][:, 2:], atol=1e-5)


def test_a_fitted_footprint_lies_under_the_object():
    """Laid flat, the cube's nearest pixel sees its front face above the table, so its flat
    footprint lies behind it; the box whose silhouette matches its pixels lies under it, and
    the cube stood up on it is near its true depth, nearer the camera, the table untouched."""
    image, flat, depth, cube, T = _cube_scene()
    T_base = np.linalg.inv(T)
    base = flat.astype(np.float64) @ T_base[:3, :3].T + T_base[:3, 3]
    flat_centre, _ = flat_footprint(base[cube][:, :2], T_base[:2, 3])
    centre, radius = silhouette_footprint(base, cube, ~cube, T_base[:3, 3])
    assert flat_centre[0] - BOX_AT[0] > 0.005
    assert abs(centre[0] - BOX_AT[0]) < 0.003 and abs(centre[1]) < 2e-3
    fitted = standing_objects(flat, cube.astype(np.int32), T, fitted=True)
    laid_flat_error = np.abs(flat[..., 2] - depth)[cube].mean()
    assert np.abs(fitted[..., 2] - depth)[cube].mean() < 0.25 * laid_flat_error
    assert np.array_equal(fitted[~cube], flat[~cube])
    assert (fitted[..., 2] <= flat[..., 2] + 1e-6).all()


def test_a_size_range_clips_the_radius_and_keeps_the_near_edge():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0.48, 0.57, 2000), rng.uniform(-0.02, 0.02, 2000)
    xy = np.stack([x, y], axis=1)
    centre, radius = flat_footprint(xy, np.zeros(2))
    inside, same = flat_footprint(xy, np.zeros(2), (0.01, 0.05))
    assert np.array_equal(inside, centre) and same == radius
    clipped, small = flat_footprint(xy, np.zeros(2), (0.01, 0.012))
    assert small == 0.012
    view = (np.median(xy, axis=0)) / np.linalg.norm(np.median(xy, axis=0))  # from the origin
    assert np.allclose(clipped, centre - view * (radius - small), atol=1e-9)


def test_a_piece_read_too_wide_is_fitted_too_far_back_unless_sized():
    """A piece one pixel wider on each side (an anti-aliased edge taken for the object) reads
    a 3 cm radius for the 2 cm cube, and its box is fitted more than 1 cm behind it; with the
    radius clipped to the objects' sizes it lies within 5 mm."""
    from scipy import ndimage

    _, flat, _, cube, T = _cube_scene()
    T_base = np.linalg.inv(T)
    base = flat.astype(np.float64) @ T_base[:3, :3].T + T_base[:3, 3]
    wide = ndimage.binary_dilation(cube, structure=np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]]))
    centre, radius = silhouette_footprint(base, wide, ~wide, T_base[:3, 3])
    assert radius > 0.028 and centre[0] - BOX_AT[0] > 0.01
    sized, radius = silhouette_footprint(base, wide, ~wide, T_base[:3, 3], (0.018, 0.022))
    assert radius == 0.022 and abs(sized[0] - BOX_AT[0]) < 0.005 and abs(sized[1]) < 2e-3
    stood = standing_objects(flat, wide.astype(np.int32), T, fitted=True, radius_m=(0.018, 0.022))
    assert not np.array_equal(stood, standing_objects(flat, wide.astype(np.int32), T, fitted=True))


def test_objects_are_small_pieces_off_the_robot_and_on_a_floor():
    image, flat, _, cube, T = _cube_scene()
    everywhere, none = np.ones(cube.shape, bool), np.zeros(cube.shape, bool)
    assert not object_pieces(image, everywhere, cube).any()  # the robot's pixels
    assert not object_pieces(image, ~cube, none).any()  # on no floor
    big = image.copy()
    big[40:60, 5:40] = (40, 60, 230)  # a tenth of the view (a mat): more than an object
    pieces = object_pieces(big, everywhere, none)
    assert not pieces[40:60, 5:40].any() and np.array_equal(pieces > 0, cube)
    assert np.array_equal(standing_objects(flat, np.zeros(cube.shape, int), T), flat)


def test_learned_pixels_complete_the_colour_rule_where_it_found_little():
    """`found` (the object network's pixels) adds an object the colour rule missed (a grey
    one on the grey table) and leaves one it found alone, though its learned pixels lie a
    pixel off (the colour rule's edge is exact)."""
    image = np.full((40, 60, 3), 150, np.uint8)
    yellow = np.zeros((40, 60), bool)
    yellow[10:14, 10:13] = True
    image[yellow] = (230, 200, 40)
    grey = np.zeros((40, 60), bool)
    grey[25:29, 40:44] = True
    image[grey] = 160  # like the table lit: not an object by colour
    everywhere, none = np.ones(yellow.shape, bool), np.zeros(yellow.shape, bool)
    by_colour = object_pieces(image, everywhere, none)
    assert np.array_equal(by_colour > 0, yellow)
    shifted = np.roll(yellow, 1, axis=1)  # the network's piece, a pixel to the right
    both = object_pieces(image, everywhere, none, found=shifted | grey)
    assert both.max() == 2
    assert np.array_equal(both > 0, yellow | grey)
    assert len(np.unique(both[grey])) == 1 and len(np.unique(both[yellow])) == 1
    assert np.array_equal(object_pieces(image, everywhere, none, found=none), by_colour)
    # off the floors nothing joins
    assert np.array_equal(object_pieces(image, ~grey, none, found=grey) > 0, yellow)
