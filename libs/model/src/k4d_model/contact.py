"""The `grasp: rigid` output option (k4d.generation; ADR 018): an object the gripper closes
on moves with the tool, rigidly, until the gripper opens.

The networks draw a grasped object a few pixels wide faintly or not at all, and its points
stay on the table (measured: 4 of 5 held-out picks drawn without the lift). Kinematics knows
where the tool is and when the gripper closes, as it knows where the robot is: a held object
is part of the kinematic chain while it is held. This is a prior, not learned. It covers
what a rigid grasp does; slips and drops stay with the networks. Pushes have their own
prior below (`pushed_objects`, the `push` option).

1. Grasps: each run of frames over which the gripper's opening falls and does not rise
   again (closing at g, opening again at r: held over g..r-1, left where frame r-1 put it);
   with `tool.holding` (a clip that continues a grasp), also frames 0..r-1 up to the first
   rise.
2. The object: frame 0's pieces of scene (off the robot) within GRASP_RADIUS_M of the tool
   frame at g that stand more than CLEARANCE_M above the surface under the tool or differ
   from that surface's colour by more than COLOUR_DIFFERENCE; the piece nearest the tool.
   The tool at or below that surface holds nothing (its fingers would meet the surface).
   With `grasp_centre_m` instead: the object's centre (its footprint's: width across the
   view and near edge, k4d_model.surface.flat_footprint) must lie within that distance of
   the tool horizontally, between the fingers; the tool's height is not checked (measured:
   the data engine's grasps that lifted their object closed 0-2.8 cm from its centre, some
   with the fingers pressed 6 mm into the table; those that failed, 3.5 cm or more).
   On an estimate the rule holds for the objects whose centre the estimate knows (stood
   up on a fitted footprint); any other piece is held by the rule without it.
   An object already held at frame 0 may be lifted clear of any surface: with none under
   the tool, the piece nearest the tool is the object.
3. Drawn: for t > g the object's frame-0 pixels and points, moved by the tool's motion since
   g, splatted far to near, behind the robot where the robot is nearer; its frame-0 pixels
   show their surroundings filled in and the points of the surface behind it.
4. Released (the `grasp_release: settle` option): from frame r the object falls onto what
   lies under it (`settled`), where without it, it hangs where the hand let go.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from k4d.camera import fit_pinhole
from k4d.tool import ToolTrack

from k4d_model.fidelity import fill_behind_robot
from k4d_model.surface import (
    FLAT_HEIGHT_PER_RADIUS,
    MIN_OBJECT_PIXELS,
    flat_footprint,
    surface_palette,
    unlike_surface,
)

OPENING_EPS = 1e-3  # joint units: a change of the opening smaller than this is noise
GRASP_RADIUS_M = 0.06  # an object's points within this of the tool frame can be held
SUPPORT_RADIUS_M = 0.12  # the surface under the tool: points within this horizontally,
SUPPORT_DEPTH_M = 0.15  # and at most this far below the tool
CLEARANCE_M = 0.005  # an object's points stand this far above its surface
FINGER_PRESS_M = 0.01  # with grasp_centre_m, the tool may be this far below the surface
COLOUR_DIFFERENCE = 30.0  # RGB distance from the surface's colour that marks an object
PUSH_REACH_M = 0.1  # objects this far from the low tool can be pushed
PUSH_FINGER_M = 0.01  # the fingers' half thickness: contact at the object's radius + this
PUSH_MIN_M = 0.002  # a smaller push is noise
SETTLE_RADIUS_M = (0.02, 0.05)  # a released object's footprint radius, clipped to this
SETTLE_TOLERANCE_M = 0.01  # a surface this far above its bottom still holds it up
MIN_SUPPORT_POINTS = 3  # fewer points under a released object: nothing seen to fall onto


@dataclass
class GraspedObject:
    """mask: (H, W) bool, the object's pixels in frame 0. T_cam_motion: (T, 4, 4), its
    motion since frame 0 in the first frame's camera (identity until it is taken)."""

    mask: np.ndarray
    T_cam_motion: np.ndarray
    grasp_frame: int
    release_frame: int
    kind: str = "grasp"  # or "push" (pushed_objects)

    def to_dict(self) -> dict:
        """What a caller may read of it (GenerationResult.metadata["contacts"]): frames and
        the object's frame-0 size in pixels. A grasp holds it over grasp_frame ..
        release_frame - 1."""
        return {"kind": self.kind, "grasp_frame": int(self.grasp_frame),
                "release_frame": int(self.release_frame), "pixels": int(self.mask.sum())}

    def moved(self, t: int) -> bool:
        return not np.allclose(self.T_cam_motion[t], np.eye(4), atol=1e-6)


def grasp_intervals(opening: np.ndarray, holding: bool = False) -> list[tuple[int, int]]:
    """[(g, r)]: the gripper closes at frame g and opens again at frame r (len(opening) when
    it stays closed); holding: it is closed on an object at frame 0, so the first is (0, r)."""
    opening = np.asarray(opening, np.float64)
    frames = len(opening)
    intervals, t = [], 1
    if holding and frames:
        release = _first_rise(opening, 1)
        intervals.append((0, release))
        t = release + 1
    while t < frames:
        if opening[t] < opening[t - 1] - OPENING_EPS:
            release = _first_rise(opening, t + 1)
            intervals.append((t, release))
            t = release
        t += 1
    return intervals


def _first_rise(opening: np.ndarray, start: int) -> int:
    """The first frame >= start at which the opening rises (len(opening) when none does)."""
    t = start
    while t < len(opening) and not opening[t] > opening[t - 1] + OPENING_EPS:
        t += 1
    return t


def grasped_objects(first_rgb: np.ndarray, first_points: np.ndarray, robot_first: np.ndarray,
                    tool: ToolTrack, T_cam_from_base: np.ndarray, centre_m: float = 0.0,
                    centred: np.ndarray | None = None,
                    radius_m: tuple[float, float] | None = None,
                    settle: bool = False) -> list[GraspedObject]:
    """The objects the gripper holds over the rollout, from frame 0's image (H, W, 3) uint8,
    its points (H, W, 3) camera frame, the robot's frame-0 pixels (H, W) bool, the tool
    track and the camera's pose. centre_m > 0 (the `grasp_centre_m` option): only an object
    whose centre lies within centre_m of the tool horizontally is held (module docstring).
    centred (H, W) bool: on an estimate, the pixels of the objects whose centre it knows
    (stood up by k4d_model.surface.standing_objects, fitted); an object off them is held
    by the rule without centre_m (None: measured points, every centre known). radius_m
    (min, max): the range of object sizes its centre is read with (flat_footprint).
    settle (the `grasp_release: settle` option): an object let go of falls onto what lies
    under it (`settled`); otherwise it stays where the gripper opened."""
    T_cam_from_base = np.asarray(T_cam_from_base, np.float64)
    T_base_from_cam = np.linalg.inv(T_cam_from_base)
    points = np.asarray(first_points, np.float64)
    base = points @ T_base_from_cam[:3, :3].T + T_base_from_cam[:3, 3]
    scene = (points[..., 2] > 0) & ~np.asarray(robot_first, bool)
    colour = np.asarray(first_rgb, np.float32)
    taken = np.zeros(scene.shape, bool)
    objects = []
    for grasp, release in grasp_intervals(tool.opening, tool.holding):
        at = tool.T_base_from_tool[grasp]
        in_hand = tool.holding and grasp == 0
        mask = _object_next_to(at[:3, 3], base, colour, scene & ~taken, in_hand, centre_m,
                               T_base_from_cam[:2, 3], radius_m)
        if mask is None and centre_m > 0 and centred is not None:
            plain = _object_next_to(at[:3, 3], base, colour, scene & ~taken, in_hand)
            mask = plain if plain is not None and not (plain & centred).any() else None
        if mask is None:
            continue
        taken |= mask
        motion = np.repeat(np.eye(4)[None], tool.frames, axis=0)
        from_grasp = np.linalg.inv(at)
        let_go = tool.T_base_from_tool[release - 1] @ from_grasp
        if settle and release < tool.frames:
            let_go = settled(let_go, mask, base, scene & ~taken, not in_hand)
        for t in range(grasp + 1, tool.frames):
            moved_base = tool.T_base_from_tool[t] @ from_grasp if t < release else let_go
            motion[t] = T_cam_from_base @ moved_base @ T_base_from_cam
        objects.append(GraspedObject(mask, motion, grasp, release))
    return objects


def settled(moved_base: np.ndarray, mask: np.ndarray, base: np.ndarray,
            scene: np.ndarray, resting: bool = True) -> np.ndarray:
    """(4, 4) the motion (base frame, since frame 0) of an object the gripper let go of with
    `moved_base`, lowered onto what lies under it (the `grasp_release: settle` option): an
    object released above a surface falls onto it. The hand places it at the height its
    plan says, which is not where it stood (a top-down grasp closes at the object's middle;
    measured on the demo data: a placed object 0.8 cm up, a stack's top let go of beside its
    base 4-6 cm above the table).

    mask: (H, W) its frame-0 pixels; base: (H, W, 3) frame 0's points, base frame; scene:
    (H, W) the pixels that may hold it up (off the robot and the held objects). Its bottom
    is where it stood in frame 0 (resting): the median height of a ring around its pixels;
    for an object already in the hand at frame 0 (not resting), its lowest point. What holds
    it up is the top (90th percentile height) of frame 0's points under its footprint where
    it was let go, among those no more than SETTLE_TOLERANCE_M above its bottom; with fewer
    than MIN_SUPPORT_POINTS of them (nothing seen there), it stays where it was let go.
    The points must be measured: what frame 0 does not show standing (an object an RGB
    image's estimate laid flat) cannot hold anything up."""
    from scipy import ndimage

    ring = ndimage.binary_dilation(mask, iterations=3) & ~ndimage.binary_dilation(mask) & scene
    own = base[mask]
    if not len(own) or (resting and not ring.any()):
        return moved_base
    centre = np.median(own, axis=0)
    bottom = float(np.median(base[..., 2][ring]) if resting else own[:, 2].min())
    radius = float(np.clip(np.percentile(np.linalg.norm(own[:, :2] - centre[:2], axis=-1), 90),
                           SETTLE_RADIUS_M[0], SETTLE_RADIUS_M[1]))
    bottom += float(moved_base[2, :3] @ centre + moved_base[2, 3] - centre[2])
    there = moved_base[:3, :3] @ centre + moved_base[:3, 3]
    under = (scene & ~mask & (np.linalg.norm(base[..., :2] - there[:2], axis=-1) < radius)
             & (base[..., 2] < bottom + SETTLE_TOLERANCE_M))
    if under.sum() < MIN_SUPPORT_POINTS:
        return moved_base
    drop = bottom - float(np.percentile(base[..., 2][under], 90))
    if drop <= 0:
        return moved_base
    lowered = moved_base.copy()
    lowered[2, 3] -= drop
    return lowered


def _object_next_to(tool_at: np.ndarray, base: np.ndarray, colour: np.ndarray,
                    scene: np.ndarray, in_hand: bool = False, centre_m: float = 0.0,
                    viewer_xy: np.ndarray | None = None,
                    radius_m: tuple[float, float] | None = None) -> np.ndarray | None:
    """in_hand: the object is already held, so it may hang clear of any surface. centre_m >
    0: the object's centre (flat_footprint, seen from viewer_xy) must lie within centre_m of
    the tool horizontally, and the tool's height against the surface is not checked."""
    from scipy import ndimage

    horizontal = np.linalg.norm(base[..., :2] - tool_at[:2], axis=-1)
    height = base[..., 2]
    pressed = FINGER_PRESS_M if centre_m > 0 else 0.0  # fingers pressed into the surface
    under = (scene & (horizontal < SUPPORT_RADIUS_M) & (height < tool_at[2] + pressed)
             & (height > tool_at[2] - SUPPORT_DEPTH_M))
    reach = scene & (np.linalg.norm(base - tool_at, axis=-1) < GRASP_RADIUS_M)
    if under.sum() >= 10:
        surface = float(np.median(height[under]))
        if centre_m <= 0 and tool_at[2] < surface + CLEARANCE_M:
            return None  # its fingers would meet the surface first
        surface_colour = np.median(colour[under & (height < surface + CLEARANCE_M)], axis=0)
        differs = np.linalg.norm(colour - surface_colour, axis=-1) > COLOUR_DIFFERENCE
        candidates = reach & (differs | (height > surface + CLEARANCE_M))
    elif in_hand:  # lifted clear of every surface: what is next to the tool is the object
        candidates = reach
    else:
        return None
    labels, count = ndimage.label(candidates, structure=np.ones((3, 3)))
    best, best_distance = None, np.inf
    for k in range(1, count + 1):
        piece = labels == k
        if piece.sum() < MIN_OBJECT_PIXELS:
            continue
        distance = float(np.linalg.norm(np.median(base[piece], axis=0) - tool_at))
        if distance < best_distance:
            best, best_distance = piece, distance
    if best is not None and centre_m > 0:
        centre, _ = flat_footprint(base[best][:, :2], viewer_xy, radius_m)
        if np.linalg.norm(centre - tool_at[:2]) > centre_m:
            return None  # the fingers close beside it
    return best


def pushed_objects(first_points: np.ndarray, robot_first: np.ndarray, tool: ToolTrack,
                   T_cam_from_base: np.ndarray, held: list[GraspedObject],
                   first_rgb: np.ndarray | None = None,
                   radius_m: tuple[float, float] | None = None,
                   known: np.ndarray | None = None) -> list[GraspedObject]:
    """The objects the tool pushes over the rollout (the `push: quasi-static` option), from
    frame 0's points (H, W, 3) camera frame (measured; estimated with first_rgb, below), the
    robot's frame-0 pixels, the tool track, the camera's pose and the objects already held
    (they are not pushed).

    An object is a piece of frame 0's scene standing more than CLEARANCE_M above the surface
    under the tool, within PUSH_REACH_M of where the tool is low (no higher than the piece's
    top). Quasi-static: between two frames the tool moves from a to b; an object whose centre
    lies within its radius + PUSH_FINGER_M of that path (sideways, and not behind a) is
    moved along the motion until it is that far ahead of b, sideways offset kept. No
    rotation, no sliding after contact ends. While the gripper carries a held object, its
    fingers push nothing (a stack's tool comes down beside the base it places on).

    first_rgb: frame 0's image (H, W, 3) uint8, for estimated points (the `push_colour`
    option; k4d_model.surface): an object is then a piece unlike the surface's colours,
    lying at the surface's height or above it; a piece touching a held object is that
    object's shadow or rest, and is not pushed; its footprint is read from its width and
    near edge (its radius clipped to radius_m, min and max), and it is taken to be as tall
    as it is wide. known (H, W) bool: with first_rgb, the pixels the estimate stood up as
    objects (the `object_pixels: learned` option's pieces): they are objects whatever their
    colour, so a white object's pixels like the surface go with it."""
    from scipy import ndimage

    T_cam_from_base = np.asarray(T_cam_from_base, np.float64)
    T_base_from_cam = np.linalg.inv(T_cam_from_base)
    points = np.asarray(first_points, np.float64)
    base = points @ T_base_from_cam[:3, :3].T + T_base_from_cam[:3, 3]
    free = (points[..., 2] > 0) & ~np.asarray(robot_first, bool)
    for obj in held:
        free &= ~obj.mask
    at = tool.T_base_from_tool[:, :3, 3]
    colour = None if first_rgb is None else np.asarray(first_rgb, np.float64)
    standing = np.zeros(free.shape, bool)
    for t in range(tool.frames):
        near = free & (np.linalg.norm(base[..., :2] - at[t, :2], axis=-1) < PUSH_REACH_M)
        under = near & (base[..., 2] < at[t, 2]) & (base[..., 2] > at[t, 2] - SUPPORT_DEPTH_M)
        if under.sum() < 10:  # the tool is not low over a surface
            continue
        surface = float(np.percentile(base[..., 2][under], 25))
        lowest = surface + CLEARANCE_M
        if colour is not None:  # laid flat: at the surface's height, told apart by colour
            lowest = surface - CLEARANCE_M
            unlike = near.copy()
            unlike[near] = unlike_surface(colour[near], surface_palette(colour, under))
            near &= unlike if known is None else unlike | known
        standing |= near & (base[..., 2] > lowest) & (base[..., 2] < surface + SUPPORT_DEPTH_M)
    carrying = np.zeros(tool.frames, bool)
    for obj in held:
        carrying[obj.grasp_frame:obj.release_frame] = True
    shadow = np.zeros(free.shape, bool)  # by colour, a held object's shadow is a piece too
    viewer_xy = None
    if colour is not None:
        for obj in held:
            shadow |= obj.mask
        shadow, viewer_xy = ndimage.binary_dilation(shadow), T_base_from_cam[:2, 3]
    labels, count = ndimage.label(standing, structure=np.ones((3, 3)))
    objects = []
    for k in range(1, count + 1):
        mask = labels == k
        if mask.sum() < MIN_OBJECT_PIXELS or (mask & shadow).any():
            continue
        shift = _quasi_static_push(base[mask], at, carrying, viewer_xy, radius_m)
        if np.linalg.norm(shift[-1]) < PUSH_MIN_M:
            continue
        motion = np.repeat(np.eye(4)[None], tool.frames, axis=0)
        for t in range(tool.frames):
            moved_base = np.eye(4)
            moved_base[:2, 3] = shift[t]
            motion[t] = T_cam_from_base @ moved_base @ T_base_from_cam
        first = int(np.argmax(np.linalg.norm(shift, axis=-1) > 0))
        objects.append(GraspedObject(mask, motion, first, tool.frames, "push"))
    return objects


def _quasi_static_push(object_base: np.ndarray, at: np.ndarray, carrying: np.ndarray,
                       viewer_xy: np.ndarray | None = None,
                       radius_m: tuple[float, float] | None = None) -> np.ndarray:
    """(T, 2) the object's horizontal shift per frame under the tool path `at` (T, 3); no
    contact at frames where `carrying` (T,) bool. viewer_xy: the camera's horizontal
    position, for an object an estimate laid flat (k4d_model.surface.flat_footprint, with
    radius_m)."""
    top = float(object_base[:, 2].max())
    if viewer_xy is None:
        centre = np.median(object_base[:, :2], axis=0)
        radius = float(np.percentile(np.linalg.norm(object_base[:, :2] - centre, axis=-1), 90))
    else:
        centre, radius = flat_footprint(object_base[:, :2], viewer_xy, radius_m)
        top = max(top, float(np.median(object_base[:, 2])) + FLAT_HEIGHT_PER_RADIUS * radius)
    reach = radius + PUSH_FINGER_M
    shift = np.zeros((len(at), 2))
    for t in range(1, len(at)):
        shift[t] = shift[t - 1]
        a, b = at[t - 1], at[t]
        if b[2] > top + CLEARANCE_M or carrying[t]:  # above the object, or holding one
            continue
        step = b[:2] - a[:2]
        length = float(np.linalg.norm(step))
        if length < 1e-4:
            continue
        d = step / length
        offset = centre + shift[t] - a[:2]
        along, sideways = float(offset @ d), float(abs(d[0] * offset[1] - d[1] * offset[0]))
        if sideways >= reach or along < -reach * 0.5 or along > length + reach:
            continue
        ahead = float((b[:2] - (centre + shift[t])) @ d) + np.sqrt(reach ** 2 - sideways ** 2)
        if ahead > 0:
            shift[t] = shift[t] + d * ahead
    return shift


def carry_grasped(rgb: np.ndarray, pointmap: np.ndarray, robot_mask: np.ndarray,
                  robot_pointmap: np.ndarray, objects: list[GraspedObject]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """rgb (T, H, W, 3) uint8 and pointmap (T, H, W, 3) metres, first camera, with the
    grasped objects drawn where the tool takes them (frame 0's pixels and points of each
    object are read from frame 0 of the two). robot_pointmap (T, H, W, 3) and robot_mask
    (T, H, W): the robot condition (its camera is fitted on them)."""
    if not objects:
        return rgb, pointmap
    camera = fit_pinhole(robot_pointmap, robot_mask)
    if camera is None:  # too few robot pixels to know the camera: nothing can be drawn
        return rgb, pointmap
    rgb, pointmap = rgb.copy(), pointmap.copy()
    frames, height, width = rgb.shape[:3]
    first_rgb, first_points = rgb[0].copy(), pointmap[0].astype(np.float64)
    held = np.zeros((height, width), bool)
    for obj in objects:
        held |= obj.mask
    behind = _surface_behind(first_points, held)
    for t in range(1, frames):
        vacated = np.zeros((height, width), bool)
        for obj in objects:
            if obj.moved(t):
                vacated |= obj.mask
        vacated &= ~robot_mask[t]
        if vacated.any():
            filled = fill_behind_robot(rgb[t].astype(np.float32), vacated)
            rgb[t][vacated] = np.clip(np.rint(filled[vacated]), 0, 255).astype(np.uint8)
            pointmap[t][vacated] = behind[vacated]
        for obj in objects:
            if obj.moved(t):
                _draw(rgb[t], pointmap[t], robot_mask[t], camera, first_rgb[obj.mask],
                      first_points[obj.mask], obj.T_cam_motion[t])
    return rgb, pointmap


def _surface_behind(first_points: np.ndarray, region: np.ndarray) -> np.ndarray:
    """(H, W, 3) points of the surface behind `region`: frame 0's inverse depth around it
    filled in over it (exact for a plane), along the region's own rays."""
    depth = first_points[..., 2]
    known = depth > 0
    inverse = np.where(known, 1.0 / np.where(known, depth, 1.0), 0.0).astype(np.float32)
    filled = fill_behind_robot(np.repeat(inverse[..., None], 3, axis=-1), region | ~known)[..., 0]
    rays = first_points / np.where(known, depth, 1.0)[..., None]
    return (rays / np.maximum(filled, 1e-6)[..., None]).astype(np.float32)


def _draw(rgb: np.ndarray, points: np.ndarray, robot_mask: np.ndarray, camera,
          colours: np.ndarray, object_points: np.ndarray, motion: np.ndarray) -> None:
    """Splat the moved points into one frame, far to near; the robot stays where it is
    nearer."""
    moved = object_points @ motion[:3, :3].T + motion[:3, 3]
    z = moved[:, 2]
    ahead = z > 1e-6
    u = np.rint(camera.fx * moved[:, 0] / np.where(ahead, z, 1.0) + camera.cx).astype(np.int64)
    v = np.rint(camera.fy * moved[:, 1] / np.where(ahead, z, 1.0) + camera.cy).astype(np.int64)
    inside = ahead & (u >= 0) & (u < rgb.shape[1]) & (v >= 0) & (v < rgb.shape[0])
    order = np.argsort(-z[inside], kind="stable")
    u, v, z = u[inside][order], v[inside][order], z[inside][order]
    moved, colours = moved[inside][order], colours[inside][order]
    draw = ~(robot_mask[v, u] & (points[v, u, 2] < z))
    rgb[v[draw], u[draw]] = colours[draw]
    points[v[draw], u[draw]] = moved[draw]
