"""Frames drawn from a sampled scene motion (`k4d_model.json` extra `latent_target: tracks`,
issue 45; after PointWorld, arXiv 2601.03782): the transformer's pointmap half holds where
each pixel's surface of frame 0 is at frame t, so the motion is the network's, and a moved
object keeps frame 0's look.

Frame t is frame 0's pixels carried along that motion: each source pixel shifted by as many
pixels as its point moved in the image (projected through a pinhole), to the nearest pixel; where several land on
one pixel the nearest to the camera is kept (a z-buffer); pixels no source reaches (what a
moved object uncovered, cracks) are filled from the pixels around them (colour), and along
their rays from the inverse depth around them (points). This module renders; it decides
nothing about where anything is.
"""

from __future__ import annotations

import numpy as np
from k4d.camera import Camera, fit_pinhole
from k4d.errors import FailedPrecondition

from k4d_model.fidelity import fill_behind_robot


def project(points: np.ndarray, camera: Camera) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(H, W, 3) camera-frame points -> their pixel columns u, rows v (H, W) float64, and
    whether each lies in front of the camera."""
    x, y, z = (points[..., i].astype(np.float64) for i in range(3))
    front = np.isfinite(points).all(-1) & (z > 1e-6)
    safe_z = np.where(front, z, 1.0)
    return camera.fx * x / safe_z + camera.cx, camera.fy * y / safe_z + camera.cy, front


def splat(values: np.ndarray, first_points: np.ndarray, moved_points: np.ndarray,
          sources: np.ndarray, camera: Camera) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward-splat one frame: `values` (H, W, C) of the `sources` (H, W) bool pixels moved
    by as many pixels as their points moved in the image, from `first_points` to
    `moved_points` (H, W, 3, camera frame, metres), rounded to the nearest pixel. The shift,
    not the moved point's own projection, places a pixel: frame 0's points may be an
    estimate that does not project back onto its pixel, and a surface that does not move
    then stays exactly where it is. Returns the splatted values (H, W, C) float32, the
    moved points that landed (H, W, 3) float32 and the covered pixels (H, W) bool;
    uncovered pixels hold zeros."""
    height, width = sources.shape
    u0, v0, front0 = project(first_points, camera)
    u1, v1, front1 = project(moved_points, camera)
    rows, cols = np.mgrid[0:height, 0:width]
    u = np.round(cols + (u1 - u0))
    v = np.round(rows + (v1 - v0))
    keep = sources & front0 & front1 & (u >= 0) & (u < width) & (v >= 0) & (v < height)
    rows, cols = np.nonzero(keep)
    target = (v[rows, cols] * width + u[rows, cols]).astype(np.int64)
    z = moved_points[rows, cols, 2]
    nearest = np.argsort(z, kind="stable")  # the nearest to the camera first
    pixel, first = np.unique(target[nearest], return_index=True)  # the first per pixel
    chosen = nearest[first]
    out = np.zeros((height * width, values.shape[-1]), np.float32)
    landed = np.zeros((height * width, 3), np.float32)
    out[pixel] = values[rows[chosen], cols[chosen]]
    landed[pixel] = moved_points[rows[chosen], cols[chosen]]
    covered = np.zeros(height * width, bool)
    covered[pixel] = True
    return (out.reshape(height, width, -1), landed.reshape(height, width, 3),
            covered.reshape(height, width))


def fill_points(points: np.ndarray, holes: np.ndarray, camera: Camera) -> np.ndarray:
    """(H, W, 3) float32: `points` with the `holes` (H, W) bool filled along their pixels'
    rays at the inverse depth filled in from around them (exact for a plane)."""
    depth = points[..., 2]
    known = ~holes & (depth > 0)
    if not known.any() or not holes.any():
        return points.astype(np.float32)
    inverse = np.where(known, 1.0 / np.where(known, depth, 1.0), 0.0).astype(np.float32)
    filled = fill_behind_robot(inverse[..., None], ~known)[..., 0]
    rows, cols = np.mgrid[0:points.shape[0], 0:points.shape[1]].astype(np.float64)
    rays = np.stack([(cols - camera.cx) / camera.fx, (rows - camera.cy) / camera.fy,
                     np.ones_like(rows)], axis=-1)
    behind = rays / np.maximum(filled, 1e-6)[..., None]
    return np.where(holes[..., None], behind, points).astype(np.float32)


def render_tracks(image: np.ndarray, first_points: np.ndarray, motion: np.ndarray,
                  sources: np.ndarray, camera: Camera) -> tuple[np.ndarray, np.ndarray]:
    """Frames from a scene motion (the module docstring).

    image (H, W, 3) uint8: frame 0; first_points (H, W, 3) metres: frame 0's points (given,
    or the model's estimate); motion (T, H, W, 3) metres: each pixel's surface's displacement
    from frame 0 by frame t (the sampled tracks minus their frame 0); sources (H, W) bool:
    the pixels that are carried (a known point, off frame 0's robot); camera: the pinhole
    the points project through. Returns RGB (T, H, W, 3) float32 levels and points
    (T, H, W, 3) float32; frame 0 is the image and `first_points` as given."""
    frames = motion.shape[0]
    colour = image.astype(np.float32)
    rgb = np.empty((frames,) + colour.shape, np.float32)
    points = np.empty((frames,) + first_points.shape, np.float32)
    rgb[0], points[0] = colour, first_points
    for t in range(1, frames):
        values, landed, covered = splat(colour, first_points, first_points + motion[t],
                                        sources, camera)
        holes = ~covered
        rgb[t] = fill_behind_robot(values, holes) if holes.any() else values
        points[t] = fill_points(landed, holes, camera)
    return rgb, points


def frames_from_tracks(image: np.ndarray, tracks: np.ndarray, first_points: np.ndarray,
                       robot_pointmap: np.ndarray, robot_mask: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """A sampled motion -> the model's frames (uint8 RGB, metric points, (T, H, W, 3)).

    tracks (T, H, W, 3) metres: the decoded pointmap half, where frame 0's surfaces are at
    each frame; first_points (H, W, 3): frame 0's points (the given depth where known, else
    the decoded frame 0). The pinhole is the one the robot's ray-cast points were projected
    with (exact); with no robot in view, the one frame 0's points fit. Frame 0's robot pixels
    are not carried: the robot is kinematics', and what it hid is filled in."""
    camera = fit_pinhole(robot_pointmap, robot_mask)
    if camera is None:
        camera = fit_pinhole(first_points, first_points[..., 2] > 0)
    if camera is None:
        raise FailedPrecondition("latent_target tracks: no pinhole fits the robot's points or "
                                 "frame 0's, so the sampled motion cannot be drawn")
    sources = (first_points[..., 2] > 0) & ~np.asarray(robot_mask[0], bool)
    rgb, points = render_tracks(image, first_points.astype(np.float32),
                                (tracks - tracks[:1]).astype(np.float32), sources, camera)
    return np.round(np.clip(rgb, 0.0, 255.0)).astype(np.uint8), points
