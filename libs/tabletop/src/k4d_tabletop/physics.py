"""MuJoCo physics of a tabletop scene (`k4d_tabletop.scene`): the robot's links are mocap
bodies driven exactly by kinematics (the robot model's FK), the objects are free bodies under
contact and gravity, plus offscreen renders of the scene camera. Used by the data engine
(whole scripted episodes) and by the policy evaluator (closed loop, chunk by chunk).

The robot description and its link meshes are passed in (the data engine takes them from
the kinematics and projection packages), so this module needs neither.
"""

from __future__ import annotations

import numpy as np
from k4d.robots.fk import forward_kinematics
from scipy.spatial.transform import Rotation

from k4d_tabletop.scene import ROBOT_GROUP, build_model
from k4d_tabletop.tasks import DURATION_S

PHYSICS_DT = 0.002


def _interp(times, values, new_times):
    return np.stack([np.interp(new_times, times, values[:, j]) for j in range(values.shape[1])], -1)


class Simulation:
    """MuJoCo scene + physics of one rollout. Grasp assist: an object is attached to the
    hand while the gripper holds it (both fingers touch it and the fingers are not shut),
    and released when the gripper opens; everything else is contact physics."""

    def __init__(self, scene, robot, link_meshes, mesh_files: dict[int, str], rollout=None):
        """scene: a SceneSpec; robot: the RobotModel; link_meshes / mesh_files: its visual
        link meshes and their MuJoCo STL files (`k4d_tabletop.scene.link_mesh_files`);
        rollout: the planned joint trajectory `run` plays (control_times, control_joints)."""
        self.scene, self.robot, self.rollout = scene, robot, rollout
        self.mujoco, self.model, self.link_bodies = build_model(scene, link_meshes, robot.link_names, mesh_files)
        mj = self.mujoco
        self.data = mj.MjData(self.model)
        self.object_bodies = [mj.mj_name2id(self.model, mj.mjtObj.mjOBJ_BODY, o.name) for o in scene.objects]
        self.object_qpos = [self.model.jnt_qposadr[self.model.body_jntadr[b]] for b in self.object_bodies]
        self.object_qvel = [self.model.jnt_dofadr[self.model.body_jntadr[b]] for b in self.object_bodies]
        names = self.robot.link_names
        self.finger_bodies = [self.link_bodies[names.index(n)] for n in ("panda_leftfinger", "panda_rightfinger")
                              if n in names and names.index(n) in self.link_bodies]
        self.hand_link = names.index("panda_hand") if "panda_hand" in names else names.index(self.robot.ee_link)
        gripper = self.robot.joint_names.index(self.robot.gripper_joints[0])
        self.gripper_index = gripper
        self.attached: tuple[int, np.ndarray] | None = None  # (object index, T_hand_from_object)
        self._quat = np.empty(4)
        self._mocap_links = np.array(list(self.link_bodies), np.int64)
        self._mocap_ids = np.array([self.model.body_mocapid[b] for b in self.link_bodies.values()], np.int64)
        mj.mj_forward(self.model, self.data)

    def _set_robot(self, poses: np.ndarray, quats_wxyz: np.ndarray) -> None:
        self.data.mocap_pos[self._mocap_ids] = poses[self._mocap_links, :3, 3]
        self.data.mocap_quat[self._mocap_ids] = quats_wxyz[self._mocap_links]

    def _object_pose(self, k: int) -> np.ndarray:
        """(4, 4) world pose of object k (0-based)."""
        T = np.eye(4)
        T[:3, :3] = self.data.xmat[self.object_bodies[k]].reshape(3, 3)
        T[:3, 3] = self.data.xpos[self.object_bodies[k]]
        return T

    def _touching_both_fingers(self) -> int | None:
        """The object both fingers touch now (lowest index), or None."""
        n = self.data.ncon
        if n == 0:
            return None
        bodies = self.model.geom_bodyid
        b1 = bodies[self.data.contact.geom1[:n]]
        b2 = bodies[self.data.contact.geom2[:n]]
        for k, obj in enumerate(self.object_bodies):
            if all(np.any(((b1 == f) & (b2 == obj)) | ((b2 == f) & (b1 == obj))) for f in self.finger_bodies) \
                    and len(self.finger_bodies) == 2:
                return k
        return None

    def _update_grasp(self, q: np.ndarray, q_prev: np.ndarray, T_world_from_hand: np.ndarray) -> None:
        g, g_prev = q[self.gripper_index], q_prev[self.gripper_index]
        if self.attached is not None and g > g_prev + 1e-6:  # opening: release
            self.attached = None
        if self.attached is None and g <= g_prev and g > 1e-3:  # closing or closed on something
            k = self._touching_both_fingers()
            if k is not None:
                self.attached = (k, np.linalg.inv(T_world_from_hand) @ self._object_pose(k))
        if self.attached is not None:
            k, T_hand_from_obj = self.attached
            T = T_world_from_hand @ T_hand_from_obj
            a, v = self.object_qpos[k], self.object_qvel[k]
            self.data.qpos[a:a + 3] = T[:3, 3]
            self.mujoco.mju_mat2Quat(self._quat, np.ascontiguousarray(T[:3, :3]).ravel())  # wxyz
            self.data.qpos[a + 3:a + 7] = self._quat
            self.data.qvel[v:v + 6] = 0.0

    def run(self, frame_times: np.ndarray, on_frame) -> None:
        """Step the physics over the rollout; call on_frame(t_index, link poses (L, 4, 4)) at
        each frame time (after the step that reaches it)."""
        mj = self.mujoco
        steps = int(round(DURATION_S / PHYSICS_DT))
        step_times = np.arange(steps + 1) * PHYSICS_DT
        q = _interp(self.rollout.control_times, self.rollout.control_joints, step_times)
        poses = forward_kinematics(self.robot, q)  # (S, L, 4, 4)
        xyzw = Rotation.from_matrix(poses[..., :3, :3].reshape(-1, 3, 3)).as_quat().reshape(*poses.shape[:2], 4)
        wxyz = xyzw[..., [3, 0, 1, 2]]
        frame_steps = np.rint(frame_times / PHYSICS_DT).astype(int)
        next_frame = 0
        self._set_robot(poses[0], wxyz[0])
        mj.mj_forward(self.model, self.data)
        for s in range(steps + 1):
            if s > 0:
                self._set_robot(poses[s], wxyz[s])
                mj.mj_step(self.model, self.data)
                self._update_grasp(q[s], q[s - 1], poses[s, self.hand_link])
                if self.attached is not None:
                    mj.mj_forward(self.model, self.data)
            while next_frame < len(frame_steps) and frame_steps[next_frame] == s:
                on_frame(next_frame, poses[s], q[s])
                next_frame += 1

    def start(self, q0: np.ndarray) -> None:
        """Place the robot at joints q0 (J,) at time 0 for closed-loop stepping (`advance`)."""
        q0 = np.asarray(q0, np.float64)
        pose = forward_kinematics(self.robot, q0[None])[0]
        wxyz = Rotation.from_matrix(pose[:, :3, :3]).as_quat()[:, [3, 0, 1, 2]]
        self._set_robot(pose, wxyz)
        self.mujoco.mj_forward(self.model, self.data)
        self.attached = None
        self.step_index, self.q = 0, q0

    def advance(self, times: np.ndarray, joints: np.ndarray) -> None:
        """Step the physics from now to times[-1] (seconds since `start`), the robot moving
        linearly in joint space from its current joints through joints (N, J) at times (N,),
        exactly as `run` moves it through a planned trajectory."""
        mj = self.mujoco
        end = int(round(float(times[-1]) / PHYSICS_DT))
        if end <= self.step_index:
            return
        steps = np.arange(self.step_index, end + 1)
        key_t = np.concatenate([[self.step_index * PHYSICS_DT], np.asarray(times, np.float64)])
        key_q = np.concatenate([self.q[None], np.asarray(joints, np.float64)])
        q = _interp(key_t, key_q, steps * PHYSICS_DT)
        poses = forward_kinematics(self.robot, q)
        xyzw = Rotation.from_matrix(poses[..., :3, :3].reshape(-1, 3, 3)).as_quat().reshape(*poses.shape[:2], 4)
        wxyz = xyzw[..., [3, 0, 1, 2]]
        for s in range(1, len(steps)):
            self._set_robot(poses[s], wxyz[s])
            mj.mj_step(self.model, self.data)
            self._update_grasp(q[s], q[s - 1], poses[s, self.hand_link])
            if self.attached is not None:
                mj.mj_forward(self.model, self.data)
        self.step_index, self.q = end, q[-1]

    def object_poses(self) -> np.ndarray:
        """(K, 7) world xyz + quaternion xyzw of every object now."""
        out = np.empty((len(self.object_bodies), 7))
        for k, body in enumerate(self.object_bodies):
            w, x, y, z = self.data.xquat[body]
            out[k] = (*self.data.xpos[body], x, y, z, w)
        return out


class SceneCamera:
    """MuJoCo renders of the episode camera (offscreen, OSMesa on CPU): one shaded pass gives
    RGB and the depth buffer (linearised to metres along the optical axis), one flat pass
    without lights or shadows gives the geom id of every pixel."""

    def __init__(self, sim: Simulation):
        from k4d.mujoco_gl import OffscreenContext

        mj = self.mujoco = sim.mujoco
        self.sim = sim
        cam = sim.scene.camera
        self.width, self.height = cam.width, cam.height
        self._gl = OffscreenContext(mj, sim.model, cam.width, cam.height)
        self._scene = mj.MjvScene(sim.model, maxgeom=sim.model.ngeom + 16)
        self._option = mj.MjvOption()
        self._option.geomgroup[:] = 1  # MuJoCo hides groups 3-5 by default; the table and walls are in 3
        self._robot_only = mj.MjvOption()
        self._robot_only.geomgroup[:] = 0
        self._robot_only.geomgroup[ROBOT_GROUP] = 1
        # The segmentation pass leaves the robot out (its ~150k triangles dominate the pass):
        # robot pixels come from our projection, see `object_id_image`.
        self._no_robot = mj.MjvOption()
        self._no_robot.geomgroup[:] = 1
        self._no_robot.geomgroup[ROBOT_GROUP] = 0
        self._cam = mj.MjvCamera()
        self._cam.type = mj.mjtCamera.mjCAMERA_FIXED
        self._cam.fixedcamid = mj.mj_name2id(sim.model, mj.mjtObj.mjOBJ_CAMERA, "cam")
        extent = sim.model.stat.extent
        self._znear, self._zfar = sim.model.vis.map.znear * extent, sim.model.vis.map.zfar * extent
        self._rgb = np.empty((cam.height, cam.width, 3), np.uint8)
        self._depth = np.empty((cam.height, cam.width), np.float32)

    def _update(self, option, segment: bool) -> None:
        mj = self.mujoco
        mj.mjv_updateScene(self.sim.model, self.sim.data, option, None, self._cam,
                           mj.mjtCatBit.mjCAT_ALL, self._scene)
        self._scene.flags[mj.mjtRndFlag.mjRND_SEGMENT] = segment
        self._scene.flags[mj.mjtRndFlag.mjRND_IDCOLOR] = segment
        self._scene.flags[mj.mjtRndFlag.mjRND_SHADOW] = not segment

    def render(self, robot_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> rgb (H, W, 3) uint8, depth (H, W) float32 metres (0 where no geometry),
        geom ids (H, W) int32 of the scene without the robot (-1 = none); robot_only: the
        robot alone, and its geom ids. Rows top to bottom (OpenGL's are bottom up)."""
        mj = self.mujoco
        option = self._robot_only if robot_only else self._option
        self._update(option, segment=False)
        self._gl.render(self._scene)
        self._gl.read(self._rgb, self._depth)
        rgb = self._rgb[::-1].copy()
        depth, hit = self._gl.metres(self._depth[::-1], self._znear, self._zfar)
        self._update(self._robot_only if robot_only else self._no_robot, segment=True)
        self._gl.render(self._scene)
        self._gl.read(self._rgb, None)
        ids = self._rgb[::-1].astype(np.int32)
        seg = ids[..., 0] + ids[..., 1] * 256 + ids[..., 2] * 65536 - 1  # scene geom index, -1 none
        geom = np.full(seg.shape, -1, np.int32)
        valid = seg >= 0
        scene_geoms = self._scene.geoms
        lut = np.array([g.objid if g.objtype == mj.mjtObj.mjOBJ_GEOM else -1
                        for g in scene_geoms[: self._scene.ngeom]] + [-1], np.int32)
        geom[valid] = lut[np.minimum(seg[valid], self._scene.ngeom)]
        if robot_only:
            hit &= geom >= 0
        depth = np.where(hit, depth, 0.0).astype(np.float32)
        return rgb, depth, geom

    def close(self) -> None:
        self._gl.close()


def depth_to_pointmap(depth: np.ndarray, camera) -> np.ndarray:
    """(..., H, W) metres along the optical axis -> (..., H, W, 3) float32 camera frame."""
    rays = camera.ray_directions().astype(np.float32)
    out = np.empty((*depth.shape, 3), np.float32)
    np.multiply(depth[..., None], rays, out=out)
    return out


ROBOT_VISIBLE_TOLERANCE_M = 0.005


def object_id_image(sim: Simulation, geom: np.ndarray, depth: np.ndarray, robot) -> np.ndarray:
    """-1 background/table, 0 robot, k >= 1 object k. `geom` (T, H, W) holds the geom ids of
    the scene rendered WITHOUT the robot; the robot is where our projection's robot surface
    is the visible one (its depth equals the scene depth within 5 mm)."""
    body_of_geom = sim.model.geom_bodyid
    lut = np.full(sim.model.ngeom + 1, -1, np.int16)  # last entry: no geom
    robot_bodies = set(sim.link_bodies.values())
    for g in range(sim.model.ngeom):
        b = int(body_of_geom[g])
        if b in robot_bodies:
            lut[g] = 0
        elif b in sim.object_bodies:
            lut[g] = sim.object_bodies.index(b) + 1
    ids = lut[np.where(geom < 0, sim.model.ngeom, geom)]
    ids[robot.mask & (np.abs(depth - robot.depth) <= ROBOT_VISIBLE_TOLERANCE_M)] = 0
    return ids
