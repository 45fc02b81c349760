"""The array work of the output options (`k4d_model.options.FidelityOptions`): the given
first latent through sampling, the change mask, relative composition. The options and their
meaning are documented in `k4d_model.options` (plain Python: the trainer's control plane
validates recipes with it and has no torch)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from k4d.camera import fit_pinhole

from k4d_model.options import FidelityOptions

# Fewer robot pixels than this in frame 0 cannot pin down a colour fit (7 coefficients per
# channel); the generated robot stays.
MIN_CALIBRATION_PIXELS = 32
# ... and for the shaded fit (16 coefficients per channel); with fewer, the colour fit alone.
MIN_SHADING_PIXELS = 64
# Ridge strength of both robot colour fits (on every coefficient but the constant; features
# on a 0-1 scale). Frame 0 shows a few hundred robot pixels, often of one link facing one
# way, and an unpenalised fit extrapolates from them to black or white links in later poses.
# Measured on validation 9013 (16 episodes, frames t >= 1, robot pixels): the shaded fit
# 11.35 dB unpenalised, 16.64 dB at 3 (16.35-16.66 dB anywhere in 1-10; 15.34 dB for the
# mean colour alone).
ROBOT_FIT_RIDGE = 3.0


def anchor_first_latent(latents: torch.Tensor, clean_first: torch.Tensor, noise: torch.Tensor,
                        sigma: float) -> torch.Tensor:
    """Latents with the RGB half of latent frame 0 replaced by the clean first-frame latent
    noised to `sigma` (flow matching: x_sigma = (1 - sigma) x_0 + sigma noise)."""
    half = latents.shape[-1] // 2
    out = latents.clone()
    out[:, :, :1, :, :half] = (1.0 - sigma) * clean_first + sigma * noise
    return out


def change_mask(rgb_delta: np.ndarray, depth_delta_m: np.ndarray | None,
                robot_mask: np.ndarray, options: FidelityOptions) -> np.ndarray:
    """(T, H, W) float32 in [0, 1]: how much of the generated change the output shows; 0 or 1
    only, unless `change_ramp` > 0 fades it in above `change_threshold`.

    rgb_delta: (T, H, W, 3) decoded change in levels (0-255 scale); depth_delta_m: (T, H, W)
    or None; robot_mask: (T, H, W) the robot condition (its pixels now and in frame 0 are
    always generated: the robot moves there, or uncovers what it hid)."""
    level = np.abs(rgb_delta).max(axis=-1)
    if options.change_ramp > 0:
        weight = np.clip((level - options.change_threshold) / options.change_ramp, 0.0, 1.0)
    else:
        weight = (level > options.change_threshold).astype(np.float32)
    if depth_delta_m is not None and options.change_depth_m > 0:  # 0: RGB change only
        weight = np.maximum(weight, np.abs(depth_delta_m) > options.change_depth_m)
    weight = np.maximum(weight, robot_mask | robot_mask[:1])
    if options.change_dilate > 0:
        weight = _grow(weight, options.change_dilate)
    weight = weight.astype(np.float32)
    weight[0] = 0.0  # frame 0 is the observation
    return weight


def _grow(weight: np.ndarray, pixels: int) -> np.ndarray:
    """(T, H, W) float grown by `pixels` in every direction (a square window's maximum), per
    frame."""
    k = 2 * pixels + 1
    grown = F.max_pool2d(torch.from_numpy(weight.astype(np.float32))[:, None], k, stride=1,
                         padding=pixels)
    return grown[:, 0].numpy()


def compose_over_input(first: np.ndarray, generated: np.ndarray, weight: np.ndarray
                       ) -> np.ndarray:
    """Generated pixels where `weight` (T, H, W) is 1, the input `first` (H, W, C) where it
    is 0, a linear blend between."""
    return _blend(np.broadcast_to(first[None], generated.shape), generated, weight)


def input_frames(image: np.ndarray, first_points: np.ndarray, robot
                 ) -> tuple[np.ndarray, np.ndarray]:
    """`decode: input`'s starting frames: every frame is the input image (H, W, 3) uint8 and
    frame 0's points (H, W, 3) metres, with the robot condition's render and points where
    the robot is in that frame. Returns (T, H, W, 3) uint8 and (T, H, W, 3) float32."""
    mask = robot.mask[..., None]
    rgb = np.where(mask, robot.rgb, image[None]).astype(np.uint8)
    points = np.where(mask, robot.pointmap, first_points[None]).astype(np.float32)
    return rgb, points


def compose_relative(first: np.ndarray, generated: np.ndarray, reference: np.ndarray,
                     weight: np.ndarray | None) -> np.ndarray:
    """x_t = x_0 + weight (generated_t - reference_t), weight (T, H, W) in [0, 1] (None: 1).

    first (H, W, C); generated, reference (T, H, W, C) in the units of `first`."""
    out = first[None] + (generated - reference)
    if weight is None:
        return out
    return _blend(np.broadcast_to(first[None], out.shape), out, weight)


def _blend(base: np.ndarray, target: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """target where weight is 1 and base where it is 0, exactly (no rounding); between, the
    linear blend."""
    w = weight[..., None]
    between = base + w * (target - base)
    return np.where(w >= 1.0, target, np.where(w <= 0.0, base, between))


def show_refined_change(rgb: np.ndarray, image: np.ndarray, delta: np.ndarray,
                        probability: np.ndarray, options: FidelityOptions) -> np.ndarray:
    """(T, H, W, 3) uint8: `rgb` with the change refiner's pixels where its change
    probability exceeds `refiner_threshold`: the input `image` plus the predicted colour
    change `delta` (levels) weighted by probability^`refiner_power`.

    Weighted, not shown whole above the threshold: power 1 is the expected pixel where the
    refiner is unsure, and measured, weighting traded changed- against static-region error
    better than any hard switch (models/demo-small/README.md, round 4)."""
    weight = probability[..., None] ** np.float32(options.refiner_power)
    refined = np.round(np.clip(image.astype(np.float32)[None] + weight * delta, 0.0, 255.0))
    shown = (probability > options.refiner_threshold)[..., None]
    return np.where(shown, refined.astype(np.uint8), rgb)


def move_refined_points(points: np.ndarray, first_points: np.ndarray, depth_m: np.ndarray,
                        probability: np.ndarray, threshold: float) -> np.ndarray:
    """(T, H, W, 3) float32: `points` with the refiner's depth where its change probability
    exceeds `threshold`: frame 0's point moved along its camera ray (a pinhole camera's
    points on one pixel's ray scale with their depth) to frame 0's depth plus the predicted
    change. Where frame 0 has no point (depth <= 0) the points stay.

    first_points: (H, W, 3) metres, camera frame; depth_m, probability: (T, H, W)."""
    z0 = first_points[..., 2]
    known = z0 > 0
    ratio = np.where(known, (z0 + depth_m) / np.where(known, z0, 1.0), 1.0)
    moved = first_points[None] * np.maximum(ratio, 0.0)[..., None]
    shown = (probability > threshold) & known
    return np.where(shown[..., None], moved, points).astype(np.float32)


def estimated_first_points(first_depth_m: np.ndarray | None, robot) -> np.ndarray | None:
    """(H, W, 3) float32 camera-frame points of frame 0 from an estimated depth (metres, (H,
    W)), along the rays of the camera fitted on the robot condition's points (ray-cast through
    the rollout's camera, so the fit is exact; k4d.camera.fit_pinhole), and the robot's own
    points where it is (known by kinematics, not estimated); None without an estimate or
    with too few robot points to fit the camera on."""
    if first_depth_m is None:
        return None
    camera = fit_pinhole(robot.pointmap, robot.mask)
    if camera is None:
        return None
    points = camera.points_from_depth(first_depth_m)
    return np.where(robot.mask[0][..., None], robot.pointmap[0], points).astype(np.float32)


def calibrated_robot_render(render: np.ndarray, image: np.ndarray, robot_mask: np.ndarray,
                            min_pixels: int = MIN_CALIBRATION_PIXELS) -> np.ndarray | None:
    """(T, H, W, 3) uint8: the robot render recoloured to the given image, or None when frame 0
    has fewer than `min_pixels` robot pixels to fit on.

    A per-channel quadratic of the render's colours (1, r, g, b, r^2, g^2, b^2 -> each output
    channel), ridge least squares (ROBOT_FIT_RIDGE) on frame 0's robot pixels, where the
    image shows the robot: the render's shading is the projection stage's, the image's is
    the scene's lights.
    render: (T, H, W, 3) uint8 on black; image: (H, W, 3) uint8; robot_mask: (T, H, W)."""
    first = robot_mask[0]
    if int(first.sum()) < min_pixels:
        return None
    coef = ridge_fit(_colour_features(render[0][first]), image[first])
    out = _colour_features(render.reshape(-1, 3)) @ coef
    return np.round(np.clip(out, 0.0, 255.0)).astype(np.uint8).reshape(render.shape)


def ridge_fit(features: np.ndarray, targets: np.ndarray, strength: float = ROBOT_FIT_RIDGE
              ) -> np.ndarray:
    """(F, C) coefficients of least squares `features` (N, F) @ coef ~ `targets` (N, C), every
    coefficient but the first (the constant) penalised by `strength` times its square."""
    penalty = np.full(features.shape[1], float(strength))
    penalty[0] = 0.0
    gram = features.T @ features + np.diag(penalty)
    coef, *_ = np.linalg.lstsq(gram, features.T @ targets.astype(np.float64), rcond=None)
    return coef


def _colour_features(rgb: np.ndarray) -> np.ndarray:
    """(N, 3) uint8 -> (N, 7) float64: 1, the channels and their squares (0-1 scale)."""
    x = rgb.astype(np.float64) / 255.0
    return np.concatenate([np.ones((len(x), 1)), x, x * x], axis=1)


def surface_normals(points: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(..., H, W, 3) unit normals of a pointmap's surface, facing the camera, from differences
    with neighbours inside `mask` (..., H, W) only (one-sided at the mask's edge: the points
    off the robot are not its surface); zero off the mask or where a direction has no
    neighbour."""
    points = np.asarray(points, np.float64)
    mask = np.asarray(mask, bool)

    def derivative(axis: int) -> np.ndarray:
        ahead = np.zeros_like(points)
        behind = np.zeros_like(points)
        ok_ahead = np.zeros_like(mask)
        ok_behind = np.zeros_like(mask)
        cut = [slice(None)] * mask.ndim
        head, tail = list(cut), list(cut)
        head[axis], tail[axis] = slice(None, -1), slice(1, None)
        head, tail = tuple(head), tuple(tail)
        pair = mask[head] & mask[tail]
        step = points[tail] - points[head]
        ahead[head], ok_ahead[head] = step, pair
        behind[tail], ok_behind[tail] = step, pair
        count = ok_ahead.astype(np.float64) + ok_behind
        total = ahead * ok_ahead[..., None] + behind * ok_behind[..., None]
        return total / np.maximum(count, 1.0)[..., None]

    normal = np.cross(derivative(mask.ndim - 1), derivative(mask.ndim - 2))
    length = np.linalg.norm(normal, axis=-1, keepdims=True)
    normal = np.where(length > 0, normal / np.maximum(length, 1e-12), 0.0)
    normal = np.where((np.sum(normal * points, axis=-1) > 0)[..., None], -normal, normal)
    return np.where(mask[..., None], normal, 0.0)


def shaded_robot_render(render: np.ndarray, points: np.ndarray, image: np.ndarray,
                        robot_mask: np.ndarray) -> np.ndarray | None:
    """(T, H, W, 3) uint8: the robot render recoloured and shaded like the given image, or
    None when frame 0 has too few robot pixels even for the colour fit.

    Per output channel, ridge least squares (ROBOT_FIT_RIDGE) on frame 0's robot pixels of
    the render's colours (1, r, g, b and their squares) and the second-order spherical
    harmonics of the surface normal from the robot's points (n, n^2, nx ny, ny nz, nx nz):
    the scene's lights shade a link by where it faces, so the fit carries the given image's
    shading to every pose that kinematics gives. Fewer than MIN_SHADING_PIXELS robot pixels: the colour fit alone.
    points: (T, H, W, 3) the robot's points in the camera frame (metres)."""
    first = robot_mask[0]
    if int(first.sum()) < MIN_SHADING_PIXELS:
        return calibrated_robot_render(render, image, robot_mask)
    normals = surface_normals(points, robot_mask)
    coef = ridge_fit(_shading_features(render[0][first], normals[0][first]), image[first])
    out = _shading_features(render.reshape(-1, 3), normals.reshape(-1, 3)) @ coef
    return np.round(np.clip(out, 0.0, 255.0)).astype(np.uint8).reshape(render.shape)


def _shading_features(rgb: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """(N, 3) uint8 colours and (N, 3) normals -> (N, 16) float64."""
    n = normal.astype(np.float64)
    pairs = np.stack([n[:, 0] * n[:, 1], n[:, 1] * n[:, 2], n[:, 0] * n[:, 2]], axis=1)
    return np.concatenate([_colour_features(rgb), n, n * n, pairs], axis=1)


def uncovered_by_robot(robot_mask: np.ndarray) -> np.ndarray:
    """(T, H, W) bool: the pixels of frame 0's robot that the robot has left by frame t (none
    in frame 0). Not grown by the image's anti-aliased robot edge: on the held-out split a
    1-pixel edge cost 4 dB of the static region and 2 dB of the uncovered one."""
    uncovered = robot_mask[:1] & ~robot_mask
    uncovered[0] = False
    return uncovered


def fill_points_behind_robot(first_points: np.ndarray, robot_points: np.ndarray,
                             robot_first: np.ndarray) -> np.ndarray:
    """(H, W, 3) float32 camera-frame points of what lies behind frame 0's robot: the inverse
    depth of frame 0's scene points around it filled in over the robot (fill_behind_robot:
    exact for a plane, whose inverse depth is linear in the pixel coordinates), along the
    rays of the robot's own ray-cast points; zeros off the robot.
    first_points (H, W, 3) frame 0's points (any at the robot's pixels); robot_points (H, W,
    3) the robot condition's frame-0 points; robot_first (H, W) bool."""
    depth = first_points[..., 2].astype(np.float32)
    known = (depth > 0) & ~robot_first
    if not known.any():
        return np.zeros_like(first_points, dtype=np.float32)
    inverse = np.where(known, 1.0 / np.where(known, depth, 1.0), 0.0).astype(np.float32)
    filled = fill_behind_robot(inverse[..., None], ~known)[..., 0]
    ray_depth = robot_points[..., 2]
    rays = np.where(robot_first[..., None] & (ray_depth[..., None] > 0),
                    robot_points / np.where(ray_depth > 0, ray_depth, 1.0)[..., None], 0.0)
    behind = rays / np.maximum(filled, 1e-6)[..., None]
    return np.where(robot_first[..., None], behind, 0.0).astype(np.float32)


def fill_behind_robot(image: np.ndarray, robot_first: np.ndarray, smooth_steps: int = 32
                      ) -> np.ndarray:
    """(H, W, 3) float32: `image` with the pixels of `robot_first` (H, W) bool filled in from
    the pixels around them: rings taken from the outside in (each pixel the mean of its
    already-known neighbours), then `smooth_steps` Jacobi steps of Laplace's equation inside
    the region, so the fill is smooth and meets its border."""
    x = torch.from_numpy(image.astype(np.float32)).permute(2, 0, 1)[None]
    unknown = torch.from_numpy(np.asarray(robot_first, bool))[None, None]
    known = (~unknown).float()
    x = x * known
    while bool((known == 0).any()) and bool((known > 0).any()):
        total = F.avg_pool2d(x * known, 3, stride=1, padding=1, count_include_pad=False)
        weight = F.avg_pool2d(known, 3, stride=1, padding=1, count_include_pad=False)
        ring = (known == 0) & (weight > 0)
        x = torch.where(ring, total / weight.clamp_min(1e-6), x)
        known = torch.where(ring, torch.ones_like(known), known)
    padded = F.pad(x, (1, 1, 1, 1), mode="replicate")
    for _ in range(smooth_steps):
        neighbours = (padded[..., :-2, 1:-1] + padded[..., 2:, 1:-1] + padded[..., 1:-1, :-2]
                      + padded[..., 1:-1, 2:]) / 4.0
        x = torch.where(unknown, neighbours, x)
        padded = F.pad(x, (1, 1, 1, 1), mode="replicate")
    return x[0].permute(1, 2, 0).numpy()
