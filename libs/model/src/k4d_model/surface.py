"""What frame 0's image says about objects on a surface when its points are an estimate
(the `push_colour` output option, k4d.generation; used by k4d_model.contact).

A depth estimate from an RGB image lays small objects flat on the surface behind them
(model card, round 9: every object pixel of the held-out split on the table's plane), so
height cannot find them. Their colour can:

1. The surface's palette: the colours covering at least PALETTE_SHARE of the surface
   pixels under the tool (k-means, PALETTE_SIZE clusters): one for a plain table, two for
   a checkerboard.
2. An object's pixel is like none of them: not one of them shaded or lit (scaled by
   SHADE_MIN..SHADE_MAX: the robot's shadow, a highlight), and not a blend of two (the
   edge between two checks), by more than COLOUR_DIFFERENCE.
3. Its footprint: laid flat, an object's sides and top land on the surface behind it, so
   the piece stretches away from the camera. Its width across the view is its size, and
   its near edge is where it stands.
4. Stood up (`object_pieces` on the floors of an estimate, then `standing_objects`, the
   `estimated_objects: standing` option): each object's pixels are put back on a box
   standing at its near edge, as tall as it is wide: its front face across the view, its
   top above.
"""

from __future__ import annotations

import numpy as np

COLOUR_DIFFERENCE = 30.0  # RGB distance from every surface colour that marks an object
PALETTE_SIZE = 4
PALETTE_SHARE = 0.15
SHADE_MIN, SHADE_MAX = 0.4, 1.15  # a surface colour in shadow or light, scaled by this
FOOTPRINT_PAD_M = 0.005  # a piece's width misses its anti-aliased edge pixels
KMEANS_ITERATIONS = 10
FLAT_HEIGHT_PER_RADIUS = 2.0  # an object laid flat by an estimate: as tall as it is wide
MIN_OBJECT_PIXELS = 3
MAX_OBJECT_SHARE = 0.02  # a bigger piece unlike the surface is not an object on it


def surface_palette(colour: np.ndarray, region: np.ndarray) -> np.ndarray:
    """(n, 3) float: the colours covering >= PALETTE_SHARE of `region` (H, W) bool in the
    image `colour` (H, W, 3) float. Deterministic: the k-means starts from the region's
    colours at evenly spaced brightness ranks."""
    pixels = colour[region].reshape(-1, 3).astype(np.float64)
    order = np.argsort(pixels.sum(axis=1), kind="stable")
    centres = pixels[order[np.linspace(0, len(order) - 1, PALETTE_SIZE).astype(int)]].copy()
    for _ in range(KMEANS_ITERATIONS):
        label = ((pixels[:, None] - centres[None]) ** 2).sum(axis=-1).argmin(axis=1)
        for k in range(PALETTE_SIZE):
            if (label == k).any():
                centres[k] = pixels[label == k].mean(axis=0)
    share = np.bincount(label, minlength=PALETTE_SIZE) / len(label)
    return centres[share >= PALETTE_SHARE]


def unlike_surface(colour: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """(...) bool: pixels of `colour` (..., 3) farther than COLOUR_DIFFERENCE from every
    palette colour (n, 3) scaled by SHADE_MIN..SHADE_MAX and from every blend of two."""
    colour = np.asarray(colour, np.float64)
    scale = np.clip(colour @ palette.T / np.maximum((palette ** 2).sum(axis=1), 1e-6),
                    SHADE_MIN, SHADE_MAX)
    nearest = np.linalg.norm(colour[..., None, :] - scale[..., None] * palette,
                             axis=-1).min(axis=-1)
    for i in range(len(palette)):
        for j in range(i + 1, len(palette)):
            a, ab = palette[i], palette[j] - palette[i]
            t = np.clip((colour - a) @ ab / max(float(ab @ ab), 1e-6), 0.0, 1.0)
            nearest = np.minimum(nearest, np.linalg.norm(colour - (a + t[..., None] * ab),
                                                         axis=-1))
    return nearest > COLOUR_DIFFERENCE


def flat_footprint(xy: np.ndarray, viewer_xy: np.ndarray) -> tuple[np.ndarray, float]:
    """(centre (2,), radius) of an object whose points `xy` (N, 2) an estimate laid flat on
    the surface, seen from `viewer_xy` (2,) (the camera, horizontally): its width across
    the view (10th to 90th percentile, + FOOTPRINT_PAD_M) and its near edge."""
    centre = np.median(xy, axis=0)
    view = centre - np.asarray(viewer_xy, np.float64)
    view = view / max(float(np.linalg.norm(view)), 1e-9)
    across_dir = np.array([-view[1], view[0]])
    along, across = (xy - centre) @ view, (xy - centre) @ across_dir
    near_edge, (left, right) = np.percentile(along, 10), np.percentile(across, [10, 90])
    radius = float(right - left) / 2 + FOOTPRINT_PAD_M
    return centre + view * (near_edge + radius) + across_dir * (left + right) / 2, radius


def object_pieces(image: np.ndarray, on_floor: np.ndarray, robot_first: np.ndarray
                  ) -> np.ndarray:
    """(H, W) int32: frame 0's objects on its floors, numbered from 1 (0: none). on_floor
    (H, W) bool: the pixels an estimate put on a horizontal plane (a table, the floor);
    their palette (surface_palette) tells objects from the surface (unlike_surface); a piece
    of object pixels off the robot's frame-0 pixels robot_first counts from MIN_OBJECT_PIXELS
    up to MAX_OBJECT_SHARE of the image."""
    from scipy import ndimage

    surface = np.asarray(on_floor, bool) & ~np.asarray(robot_first, bool)
    pieces = np.zeros(surface.shape, np.int32)
    if surface.sum() < PALETTE_SIZE:
        return pieces
    colour = np.asarray(image, np.float64)
    unlike = np.zeros(surface.shape, bool)
    unlike[surface] = unlike_surface(colour[surface], surface_palette(colour, surface))
    labels, count = ndimage.label(unlike, structure=np.ones((3, 3)))
    sizes = np.bincount(labels.ravel(), minlength=count + 1)
    keep = (sizes >= MIN_OBJECT_PIXELS) & (sizes <= MAX_OBJECT_SHARE * labels.size)
    keep[0] = False
    numbers = np.cumsum(keep) * keep
    return numbers[labels].astype(np.int32)


def standing_objects(points: np.ndarray, pieces: np.ndarray, T_cam_from_base: np.ndarray
                     ) -> np.ndarray:
    """(H, W, 3) float32: frame 0's estimated points (H, W, 3), camera frame, with the objects
    an estimate laid flat stood up again.

    pieces (H, W) int: the objects (object_pieces). Each becomes a box on its flat footprint
    (flat_footprint), as tall as it is wide: each pixel's point moves along its own ray to
    the box's front face, or to its top where the ray passes over the front face. A point
    never moves away from the camera, so the image and its pixels stay as they are; only
    depth changes."""
    points = np.asarray(points, np.float32)
    T_cam_from_base = np.asarray(T_cam_from_base, np.float64)
    T_base_from_cam = np.linalg.inv(T_cam_from_base)
    base = points.astype(np.float64) @ T_base_from_cam[:3, :3].T + T_base_from_cam[:3, 3]
    eye = T_base_from_cam[:3, 3]
    out = points.copy()
    for k in range(1, int(pieces.max(initial=0)) + 1):
        piece = (pieces == k) & (points[..., 2] > 0)
        if not piece.any():
            continue
        flat = base[piece]
        centre, radius = flat_footprint(flat[:, :2], eye[:2])
        view = (centre - eye[:2]) / max(float(np.linalg.norm(centre - eye[:2])), 1e-9)
        front, top = centre - view * radius, float(np.median(flat[:, 2])) + (
            FLAT_HEIGHT_PER_RADIUS * radius)
        ray = flat - eye  # the flat point is at 1 along its ray
        across = ray[:, :2] @ view
        s = np.where(across > 1e-9, ((front - eye[:2]) @ view) / np.maximum(across, 1e-9), 1.0)
        over = eye[2] + s * ray[:, 2] > top  # passes over the front face: meets the top
        s = np.where(over & (ray[:, 2] < -1e-9), (top - eye[2]) / np.minimum(ray[:, 2], -1e-9), s)
        s = np.clip(s, 0.0, 1.0)[:, None]
        out[piece] = ((eye + s * ray) @ T_cam_from_base[:3, :3].T + T_cam_from_base[:3, 3]
                      ).astype(np.float32)
    return out
