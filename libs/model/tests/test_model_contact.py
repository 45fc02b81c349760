"""The grasp option (k4d_model.contact): a held object moves with the tool; nothing moves
when the gripper closes on nothing, at the table, or stays open."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.errors import InvalidArgument
from k4d.generation import FidelityOptions
from k4d.tool import ToolTrack, tool_track
from k4d_model.contact import carry_grasped, grasp_intervals, grasped_objects
from k4d_model.pipeline import Kinema4DPipeline
from k4d_model.testing import CallableDenoiser as Denoiser
from k4d_model.testing import sliding_box_robot

H, W, FRAMES = 48, 64, 5
CAMERA = Camera(width=W, height=H, fx=60.0, fy=60.0, cx=31.5, cy=23.5)
# Looking straight down from 1 m above the base: base z up is camera -z.
T_CAM_FROM_BASE = np.array([[1.0, 0, 0, 0], [0, -1.0, 0, 0], [0, 0, -1.0, 1.0], [0, 0, 0, 1]])
T_BASE_FROM_CAM = np.linalg.inv(T_CAM_FROM_BASE)
TABLE, BOX = (150, 150, 150), (220, 30, 30)
BOX_AT, BOX_HALF, BOX_TOP = np.array([0.1, 0.05]), 0.02, 0.04
OPEN, CLOSED = 0.04, 0.02


def _scene():
    """Frame 0 of a table (base z = 0) with a red box on it, and a robot block in a corner
    (the camera is fitted on its ray-cast points): rgb (H, W, 3), points (H, W, 3), and the
    robot condition (T, H, W) mask and (T, H, W, 3) points."""
    rays = CAMERA.ray_directions()
    table = rays * 1.0  # every ray meets the table 1 m away
    base = table @ T_BASE_FROM_CAM[:3, :3].T + T_BASE_FROM_CAM[:3, 3]
    box = (np.abs(base[..., :2] - BOX_AT) < BOX_HALF).all(axis=-1)
    points = np.where(box[..., None], rays * (1.0 - BOX_TOP), table).astype(np.float32)
    rgb = np.where(box[..., None], np.array(BOX, np.uint8), np.array(TABLE, np.uint8))
    robot = np.zeros((FRAMES, H, W), bool)
    robot[:, 2:10, 2:12] = True
    robot_points = np.where(robot[..., None], (rays * 0.7)[None], 0.0).astype(np.float32)
    return rgb.astype(np.uint8), points, box, robot, robot_points


def _tool(path_z, path_x, opening) -> ToolTrack:
    poses = np.repeat(np.eye(4)[None], FRAMES, axis=0)
    poses[:, 0, 3], poses[:, 1, 3], poses[:, 2, 3] = path_x, BOX_AT[1], path_z
    return ToolTrack(poses, np.asarray(opening, np.float64))


def _pick():
    """Reach the box at its middle height, close at frame 2, lift 20 cm and carry it 15 cm
    towards -x by frame 4."""
    return _tool([0.3, 0.02, 0.02, 0.12, 0.22], [0.1, 0.1, 0.1, 0.02, -0.05],
                 [OPEN, OPEN, CLOSED, CLOSED, CLOSED])


def _project(point_base):
    p = T_CAM_FROM_BASE[:3, :3] @ point_base + T_CAM_FROM_BASE[:3, 3]
    return (int(round(CAMERA.fy * p[1] / p[2] + CAMERA.cy)),
            int(round(CAMERA.fx * p[0] / p[2] + CAMERA.cx)))


def test_grasp_intervals_close_and_open_again():
    assert grasp_intervals([OPEN, OPEN, CLOSED, CLOSED, OPEN]) == [(2, 4)]
    assert grasp_intervals([OPEN, CLOSED, CLOSED]) == [(1, 3)]  # never opens again
    assert grasp_intervals([OPEN, 0.03, CLOSED, OPEN, OPEN, CLOSED]) == [(1, 3), (5, 6)]
    assert grasp_intervals([OPEN] * 4) == []
    assert grasp_intervals([OPEN, OPEN - 1e-4, OPEN]) == []  # below the noise


def test_the_held_object_moves_with_the_tool():
    rgb0, points0, box, robot, robot_points = _scene()
    held = grasped_objects(rgb0, points0, robot[0], _pick(), T_CAM_FROM_BASE)
    assert len(held) == 1
    assert np.array_equal(held[0].mask, box)
    assert (held[0].grasp_frame, held[0].release_frame) == (2, FRAMES)
    rgb = np.repeat(rgb0[None], FRAMES, axis=0)
    points = np.repeat(points0[None], FRAMES, axis=0)
    out_rgb, out_points = carry_grasped(rgb, points, robot, robot_points, held)
    assert np.array_equal(out_rgb[:3], rgb[:3]) and np.array_equal(out_points[:3], points[:3])
    # frame 4: the box's top is 20 cm higher and 15 cm further along -x
    top = np.array([BOX_AT[0] - 0.15, BOX_AT[1], BOX_TOP + 0.20])
    v, u = _project(top)
    assert tuple(out_rgb[4, v, u]) == BOX
    assert out_points[4, v, u, 2] == pytest.approx(1.0 - top[2], abs=1e-4)
    # where it stood: the table's colour and the table's points, along the same rays
    v0, u0 = _project(np.array([*BOX_AT, BOX_TOP]))
    assert np.abs(out_rgb[4, v0, u0].astype(int) - TABLE).max() <= 1
    assert out_points[4, v0, u0, 2] == pytest.approx(1.0, abs=1e-3)
    assert not (out_rgb[4] == BOX).all(axis=-1)[box].any()


def test_the_robot_stays_in_front_of_the_held_object():
    rgb0, points0, box, robot, robot_points = _scene()
    top = np.array([BOX_AT[0] - 0.15, BOX_AT[1], BOX_TOP + 0.20])
    v, u = _project(top)
    robot[4, v - 1:v + 2, u - 1:u + 2] = True  # the hand over the box, 0.5 m from the camera
    robot_points[4, v - 1:v + 2, u - 1:u + 2] = CAMERA.ray_directions()[v - 1:v + 2, u - 1:u + 2] * 0.5
    rgb = np.repeat(rgb0[None], FRAMES, axis=0)
    rgb[4][robot[4]] = (255, 255, 255)
    points = np.where(robot[..., None], robot_points, points0[None]).astype(np.float32)
    held = grasped_objects(rgb0, points0, robot[0], _pick(), T_CAM_FROM_BASE)
    out_rgb, out_points = carry_grasped(rgb, points, robot, robot_points, held)
    assert tuple(out_rgb[4, v, u]) == (255, 255, 255)
    assert out_points[4, v, u, 2] == pytest.approx(0.5, abs=1e-4)


@pytest.mark.parametrize("case", ["open", "at the table", "far away"])
def test_nothing_is_held(case):
    rgb0, points0, _, robot, _ = _scene()
    tool = {"open": _tool(0.02, 0.1, [OPEN] * FRAMES),
            # its fingers would meet the table first
            "at the table": _tool(0.0, 0.1, [OPEN, OPEN, CLOSED, CLOSED, CLOSED]),
            "far away": _tool(0.02, -0.2, [OPEN, OPEN, CLOSED, CLOSED, CLOSED])}[case]
    assert grasped_objects(rgb0, points0, robot[0], tool, T_CAM_FROM_BASE) == []


def test_the_object_stays_where_the_gripper_opens():
    rgb0, points0, _, robot, _ = _scene()
    tool = _tool([0.02, 0.02, 0.12, 0.12, 0.3], [0.1, 0.1, 0.0, -0.05, -0.05],
                 [OPEN, CLOSED, CLOSED, OPEN, OPEN])  # released at frame 3, tool leaves
    (held,) = grasped_objects(rgb0, points0, robot[0], tool, T_CAM_FROM_BASE)
    assert (held.grasp_frame, held.release_frame) == (1, 3)
    assert np.allclose(held.T_cam_motion[3], held.T_cam_motion[2])
    assert np.allclose(held.T_cam_motion[4], held.T_cam_motion[2])


def _place_over(x_release: float, z_release: float) -> ToolTrack:
    """Take the box at its middle height, carry it to x_release (y unchanged) at z_release
    and open the gripper there at frame 3; the tool then rises."""
    return _tool([0.02, 0.02, z_release, z_release, 0.3], [0.1, 0.1, x_release, x_release,
                                                           x_release],
                 [OPEN, CLOSED, CLOSED, OPEN, OPEN])


def _base_motion(held, t):
    return T_BASE_FROM_CAM @ held.T_cam_motion[t] @ T_CAM_FROM_BASE


def test_a_released_object_falls_onto_the_table():
    """grasp_release: settle. Let go of 10 cm above the table, the box lands on it: from
    frame 3 its motion is the carry alone, no height; without the option it hangs."""
    rgb0, points0, _, robot, _ = _scene()
    tool = _place_over(-0.05, 0.12)
    (hanging,) = grasped_objects(rgb0, points0, robot[0], tool, T_CAM_FROM_BASE)
    (landed,) = grasped_objects(rgb0, points0, robot[0], tool, T_CAM_FROM_BASE, settle=True)
    assert np.allclose(_base_motion(hanging, 3)[:3, 3], [-0.15, 0.0, 0.10])
    for t in (3, 4):
        assert np.allclose(_base_motion(landed, t)[:3, 3], [-0.15, 0.0, 0.0], atol=1e-6)
    assert np.allclose(landed.T_cam_motion[:3], hanging.T_cam_motion[:3])  # held: the same


def test_a_released_object_lands_on_what_is_under_it():
    """Let go of over a second, 3 cm tall box (a stack's base), the box lands on its top:
    3 cm higher than it started; beside it, on the table. Let go of where frame 0 shows
    nothing (outside the image), it stays where the hand opened."""
    rgb0, points0, box, robot, robot_points = _scene()
    rays = CAMERA.ray_directions()
    table_base = (rays * 1.0) @ T_BASE_FROM_CAM[:3, :3].T + T_BASE_FROM_CAM[:3, 3]
    base_box = (np.abs(table_base[..., :2] - [-0.05, BOX_AT[1]]) < BOX_HALF).all(axis=-1)
    points0 = np.where(base_box[..., None], rays * (1.0 - 0.03), points0).astype(np.float32)
    rgb0 = np.where(base_box[..., None], np.array((30, 30, 220), np.uint8), rgb0)
    (stacked,) = grasped_objects(rgb0, points0, robot[0], _place_over(-0.05, 0.12),
                                 T_CAM_FROM_BASE, settle=True)
    assert np.array_equal(stacked.mask, box)
    assert np.allclose(_base_motion(stacked, 4)[:3, 3], [-0.15, 0.0, 0.03], atol=1e-6)
    # beside it, on the table
    (beside,) = grasped_objects(rgb0, points0, robot[0], _place_over(0.25, 0.12),
                                T_CAM_FROM_BASE, settle=True)
    assert np.allclose(_base_motion(beside, 4)[:3, 3], [0.15, 0.0, 0.0], atol=1e-6)
    (off_view,) = grasped_objects(rgb0, points0, robot[0], _place_over(-0.9, 0.12),
                                  T_CAM_FROM_BASE, settle=True)
    assert np.allclose(_base_motion(off_view, 4)[:3, 3], [-1.0, 0.0, 0.10])


def test_an_object_held_at_frame_0_falls_from_its_lowest_point():
    """A clip that continues a grasp: the box, held 20 cm up at frame 0 (the table under it
    hidden), is let go of 10 cm along -x and falls the 20 cm onto the table."""
    rgb0, points0, box, robot, _ = _lifted_scene()
    top = (points0[box].mean(axis=0) @ T_BASE_FROM_CAM[:3, :3].T + T_BASE_FROM_CAM[:3, 3])
    poses = np.repeat(np.eye(4)[None], FRAMES, axis=0)
    poses[:, :3, 3] = top - [0.0, 0.0, BOX_TOP / 2]
    poses[:, 0, 3] += [0.0, -0.05, -0.1, -0.1, -0.1]
    tool = ToolTrack(poses, [CLOSED, CLOSED, CLOSED, OPEN, OPEN], holding=True)
    (held,) = grasped_objects(rgb0, points0, robot[0], tool, T_CAM_FROM_BASE, settle=True)
    # its lowest seen point is its top (seen from above): it falls until the top is on the
    # table, as far as frame 0 shows it
    assert np.allclose(_base_motion(held, 4)[:3, 3], [-0.1, 0.0, -0.2 - BOX_TOP], atol=1e-6)


def test_the_release_option_is_checked():
    assert FidelityOptions.check({"grasp_release": "settle"}).grasp_release == "settle"
    assert FidelityOptions.from_extra({}).grasp_release == ""
    with pytest.raises(InvalidArgument) as err:
        FidelityOptions.check({"grasp_release": "drop"})
    assert err.value.violations[0].field == "extra.grasp_release"


def test_tool_track_checks_its_arrays():
    with pytest.raises(InvalidArgument) as err:
        ToolTrack(np.eye(4)[None], np.zeros(2))
    assert err.value.violations[0].field == "tool.opening"
    with pytest.raises(InvalidArgument) as err:
        ToolTrack(np.full((2, 4, 4), np.nan), np.zeros(2))
    assert err.value.violations[0].field == "tool.T_base_from_tool"
    with pytest.raises(InvalidArgument, match="3 frames"):
        ToolTrack(np.repeat(np.eye(4)[None], 3, axis=0), np.zeros(3)).check_frames(5)


def test_tool_track_reads_the_kinematics_output():
    from k4d.robots.descriptions import load_robot
    from k4d.robots.fk import forward_kinematics

    panda = load_robot("panda")
    joints = np.repeat(panda.mid_configuration[None], 3, axis=0)
    finger = panda.joint_indices(["panda_finger_joint1"])[0]
    joints[:, finger] = [0.04, 0.02, 0.0]
    poses = forward_kinematics(panda, joints)
    tool = tool_track(panda, joints, poses)
    assert np.allclose(tool.opening, [0.04, 0.02, 0.0])
    assert np.allclose(tool.T_base_from_tool, poses[:, panda.link_index("panda_hand_tcp")])
    ur5 = load_robot("ur5")  # no gripper: never closes
    q = np.repeat(ur5.mid_configuration[None], 2, axis=0)
    assert not tool_track(ur5, q, forward_kinematics(ur5, q)).opening.any()


def test_the_option_needs_the_tool_and_the_pose(make_tiny):
    """Without a tool track (a caller that has none) the option changes nothing; a track
    of the wrong length is refused."""
    assert FidelityOptions.check({"grasp": "rigid"}).grasp == "rigid"
    with pytest.raises(InvalidArgument, match="grasp"):
        FidelityOptions.check({"grasp": "sticky"})
    assert FidelityOptions.check({"push": "quasi-static"}).push == "quasi-static"
    with pytest.raises(InvalidArgument, match="push"):
        FidelityOptions.check({"push": "dynamic"})
    components = make_tiny("act")[0]
    info = components.info
    frames = info.num_frames
    image, robot = sliding_box_robot(frames, info.height, info.width)
    outputs = []
    for extra in ({"first_frame": "given"},
                  {"first_frame": "given", "grasp": "rigid", "push": "quasi-static"}):
        components.info.extra = extra
        pipe = Kinema4DPipeline(components, backend=Denoiser(components.transformer))
        outputs.append(pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1))
    assert np.array_equal(outputs[0].rgb, outputs[1].rgb)
    assert np.array_equal(outputs[0].pointmap, outputs[1].pointmap)
    assert outputs[1].metadata["contacts"] == []  # nothing was moved by a prior
    with pytest.raises(InvalidArgument, match="frames"):
        pipe(image, robot.rgb, robot.pointmap, robot.mask, num_steps=1,
             tool=ToolTrack(np.repeat(np.eye(4)[None], frames + 1, axis=0), np.zeros(frames + 1)))


def _sweep(z, x0=0.17, x1=0.03, y=BOX_AT[1]):
    """The closed tool lowered 7 cm behind the box's centre (+x), then swept to x1 by frame 4."""
    poses = np.repeat(np.eye(4)[None], FRAMES, axis=0)
    poses[:, 0, 3] = [x0, x0, x0, (x0 + x1) / 2, x1]
    poses[:, 1, 3] = y
    poses[:, 2, 3] = [0.3, z, z, z, z]
    return ToolTrack(poses, np.full(FRAMES, CLOSED))


def test_the_swept_object_is_pushed_ahead_of_the_tool():
    from k4d_model.contact import pushed_objects

    rgb0, points0, box, robot, robot_points = _scene()
    (pushed,) = pushed_objects(points0, robot[0], _sweep(0.02), T_CAM_FROM_BASE, [])
    assert np.array_equal(pushed.mask, box)
    motion = T_BASE_FROM_CAM @ pushed.T_cam_motion[4] @ T_CAM_FROM_BASE  # in the base frame
    # the tool ends at x = 0.03: the box's centre ends its reach (radius + 1 cm) beyond it
    assert -0.11 < motion[0, 3] < -0.08 and abs(motion[1, 3]) < 1e-9 and motion[2, 3] == 0.0
    assert not pushed.moved(1) and not pushed.moved(2)  # lowered behind it: no contact yet
    rgb = np.repeat(rgb0[None], FRAMES, axis=0)
    out_rgb, _ = carry_grasped(rgb, np.repeat(points0[None], FRAMES, axis=0), robot,
                               robot_points, [pushed])
    v, u = _project(np.array([BOX_AT[0] + motion[0, 3], BOX_AT[1], BOX_TOP]))
    assert tuple(out_rgb[4, v, u]) == BOX


@pytest.mark.parametrize("case", ["above it", "beside it", "flat texture"])
def test_nothing_is_pushed(case):
    from k4d_model.contact import pushed_objects

    rgb0, points0, box, robot, _ = _scene()
    tool = {"above it": _sweep(BOX_TOP + 0.02), "beside it": _sweep(0.02, y=BOX_AT[1] + 0.06),
            "flat texture": _sweep(0.02)}[case]
    if case == "flat texture":  # a patch of another colour on the table, not standing on it
        points0 = np.where(box[..., None], CAMERA.ray_directions() * 1.0, points0).astype(np.float32)
    assert pushed_objects(points0, robot[0], tool, T_CAM_FROM_BASE, []) == []


def test_a_clip_that_continues_a_grasp_starts_held():
    assert grasp_intervals([CLOSED, CLOSED, CLOSED], holding=True) == [(0, 3)]
    assert grasp_intervals([CLOSED, CLOSED, OPEN, OPEN], holding=True) == [(0, 2)]
    assert grasp_intervals([CLOSED, OPEN, CLOSED], holding=True) == [(0, 1), (2, 3)]
    assert grasp_intervals([CLOSED, CLOSED, CLOSED]) == []  # closed throughout: no closing


def _lifted_scene(height=0.2):
    """Frame 0 with the box held `height` above the table (its points that far nearer the
    camera, the table under it hidden)."""
    rgb0, points0, box, robot, robot_points = _scene()
    rays = CAMERA.ray_directions()
    points0 = np.where(box[..., None], rays * (1.0 - BOX_TOP - height), points0).astype(np.float32)
    return rgb0, points0, box, robot, robot_points


def test_the_object_held_at_frame_0_moves_with_the_tool():
    """The second chunk of a policy's pick: the box is in the closed gripper, 20 cm up, when
    the clip starts; the tool carries it 10 cm along -x and opens at frame 4."""
    rgb0, points0, box, robot, robot_points = _lifted_scene()
    top = (points0[box].mean(axis=0) @ T_BASE_FROM_CAM[:3, :3].T + T_BASE_FROM_CAM[:3, 3])
    poses = np.repeat(np.eye(4)[None], FRAMES, axis=0)
    poses[:, :3, 3] = top - [0.0, 0.0, BOX_TOP / 2]  # between the fingers
    poses[:, 0, 3] += [0.0, 0.0, -0.05, -0.1, -0.1]
    opening = [CLOSED, CLOSED, CLOSED, CLOSED, OPEN]
    assert grasped_objects(rgb0, points0, robot[0], ToolTrack(poses, opening),
                           T_CAM_FROM_BASE) == []  # not told it holds: nothing closes on it
    (held,) = grasped_objects(rgb0, points0, robot[0], ToolTrack(poses, opening, holding=True),
                              T_CAM_FROM_BASE)
    assert np.array_equal(held.mask, box)
    assert (held.grasp_frame, held.release_frame) == (0, 4)
    assert held.to_dict() == {"kind": "grasp", "grasp_frame": 0, "release_frame": 4,
                              "pixels": int(box.sum())}
    motion = T_BASE_FROM_CAM @ held.T_cam_motion[4] @ T_CAM_FROM_BASE
    assert np.allclose(motion[:3, 3], [-0.1, 0.0, 0.0])  # left where frame 3 put it
    out_rgb, _ = carry_grasped(np.repeat(rgb0[None], FRAMES, axis=0),
                               np.repeat(points0[None], FRAMES, axis=0), robot, robot_points,
                               [held])
    v, u = _project(top - [0.1, 0.0, 0.0])
    assert tuple(out_rgb[4, v, u]) == BOX
    v0, u0 = _project(top)
    assert tuple(out_rgb[4, v0, u0]) != BOX  # it left where it was held


def test_a_push_is_no_grasp():
    from k4d_model.contact import pushed_objects

    rgb0, points0, box, robot, _ = _scene()
    (pushed,) = pushed_objects(points0, robot[0], _sweep(0.02), T_CAM_FROM_BASE, [])
    assert pushed.kind == "push" and pushed.to_dict()["kind"] == "push"


def _flat(points0, box):
    """The box laid flat on the table, as a depth estimate from the image puts it."""
    return np.where(box[..., None], CAMERA.ray_directions() * 1.0, points0).astype(np.float32)


def test_an_object_laid_flat_is_pushed_by_its_colour():
    """`push_colour`: an estimate puts the box on the table; height finds nothing there,
    colour does, and the box is taken as tall as it is wide."""
    from k4d_model.contact import pushed_objects

    rgb0, points0, box, robot, _ = _scene()
    flat = _flat(points0, box)
    assert pushed_objects(flat, robot[0], _sweep(0.02), T_CAM_FROM_BASE, []) == []
    (pushed,) = pushed_objects(flat, robot[0], _sweep(0.02), T_CAM_FROM_BASE, [],
                               first_rgb=rgb0)
    assert np.array_equal(pushed.mask, box)
    motion = T_BASE_FROM_CAM @ pushed.T_cam_motion[4] @ T_CAM_FROM_BASE
    assert -0.11 < motion[0, 3] < -0.07 and abs(motion[1, 3]) < 1e-9
    # 4 cm wide, so ~4 cm tall: a tool 8 cm up passes over it
    assert pushed_objects(flat, robot[0], _sweep(0.08), T_CAM_FROM_BASE, [],
                          first_rgb=rgb0) == []


@pytest.mark.parametrize("patch", [(90, 90, 90), (165, 165, 165)])
def test_a_shadow_or_a_highlight_is_not_pushed(patch):
    from k4d_model.contact import pushed_objects

    rgb0, points0, box, robot, _ = _scene()
    rgb0[box] = patch  # the table's grey at 0.6x and 1.1x
    assert pushed_objects(_flat(points0, box), robot[0], _sweep(0.02), T_CAM_FROM_BASE, [],
                          first_rgb=rgb0) == []


def test_nothing_is_pushed_while_the_gripper_carries_an_object():
    """A stack's tool comes down beside its base with the cube in hand: no push then."""
    from k4d_model.contact import GraspedObject, pushed_objects

    rgb0, points0, box, robot, _ = _scene()
    elsewhere = np.zeros((H, W), bool)
    elsewhere[40:44, 50:54] = True
    carried = GraspedObject(elsewhere, np.repeat(np.eye(4)[None], FRAMES, axis=0), 1, FRAMES)
    assert pushed_objects(points0, robot[0], _sweep(0.02), T_CAM_FROM_BASE, [carried]) == []
    released = GraspedObject(elsewhere, carried.T_cam_motion, 1, 2)  # let go before the sweep
    assert len(pushed_objects(points0, robot[0], _sweep(0.02), T_CAM_FROM_BASE, [released])) == 1


def test_grasp_centre_holds_only_what_lies_between_the_fingers():
    """`grasp_centre_m`: the fingers pressed onto the table still close around an object whose
    centre lies between them; 4 cm beside it they close on air, though the object is within
    reach of the tool."""
    rgb0, points0, box, robot, _ = _scene()
    closing = [OPEN, OPEN, CLOSED, CLOSED, CLOSED]
    pressed = _tool(0.0, BOX_AT[0], closing)  # at the table, over the object's centre
    assert grasped_objects(rgb0, points0, robot[0], pressed, T_CAM_FROM_BASE) == []
    (held,) = grasped_objects(rgb0, points0, robot[0], pressed, T_CAM_FROM_BASE, centre_m=0.03)
    assert np.array_equal(held.mask, box)
    beside = _tool(0.02, BOX_AT[0] + 0.04, closing)
    assert len(grasped_objects(rgb0, points0, robot[0], beside, T_CAM_FROM_BASE)) == 1
    assert grasped_objects(rgb0, points0, robot[0], beside, T_CAM_FROM_BASE,
                           centre_m=0.03) == []
    # on an estimate, the rule holds for objects whose centre it knows (centred)
    assert grasped_objects(rgb0, points0, robot[0], beside, T_CAM_FROM_BASE, centre_m=0.03,
                           centred=box) == []
    nowhere = np.zeros_like(box)  # an object the estimate did not stand up: the plain rule
    (plain,) = grasped_objects(rgb0, points0, robot[0], beside, T_CAM_FROM_BASE,
                               centre_m=0.03, centred=nowhere)
    assert np.array_equal(plain.mask, box)
    assert FidelityOptions.check({"grasp_centre_m": 0.03}).grasp_centre_m == 0.03
    for bad in (-0.01, "3 cm", True):
        with pytest.raises(InvalidArgument, match="grasp_centre_m"):
            FidelityOptions.check({"grasp_centre_m": bad})


def test_a_size_range_moves_the_centre_that_the_grasp_and_the_push_read():
    """`object_radius_m`: the centre lies the clipped radius behind the near edge, so the
    centre test and the push's contact move with it. The camera is above the base's origin,
    so +x runs mostly along the view to the box: its centre read with radii of 3.5-5 cm lies
    past the true one, within 3 cm of a tool 4 cm beyond it; a wider object is met sooner by
    the tool sweeping -x and pushed farther."""
    from k4d_model.contact import pushed_objects

    rgb0, points0, box, robot, _ = _scene()
    beyond = _tool(0.02, BOX_AT[0] + 0.04, [OPEN, OPEN, CLOSED, CLOSED, CLOSED])
    assert grasped_objects(rgb0, points0, robot[0], beyond, T_CAM_FROM_BASE,
                           centre_m=0.03) == []
    (held,) = grasped_objects(rgb0, points0, robot[0], beyond, T_CAM_FROM_BASE, centre_m=0.03,
                              radius_m=(0.035, 0.05))
    assert np.array_equal(held.mask, box)

    def pushed_x(radius_m):
        (pushed,) = pushed_objects(_flat(points0, box), robot[0], _sweep(0.02), T_CAM_FROM_BASE,
                                   [], first_rgb=rgb0, radius_m=radius_m)
        return (T_BASE_FROM_CAM @ pushed.T_cam_motion[4] @ T_CAM_FROM_BASE)[0, 3]

    assert pushed_x((0.035, 0.05)) < pushed_x(None) - 0.03
    radius = [0.018, 0.028]
    assert FidelityOptions.check({"object_radius_m": radius}).object_radius_m == (0.018, 0.028)
    assert FidelityOptions.from_extra({}).object_radius_m is None
    for bad in ([0.03, 0.02], [0.0, 0.02], [0.02], "2 cm", [True, 0.02]):
        with pytest.raises(InvalidArgument, match="object_radius_m"):
            FidelityOptions.check({"object_radius_m": bad})
