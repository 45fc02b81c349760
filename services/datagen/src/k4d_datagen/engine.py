"""One synthetic episode: scene -> scripted plan -> IK (our kinematics) -> MuJoCo physics
with the robot's links as mocap bodies -> MuJoCo RGB/depth/segmentation of the scene ->
OUR projection of the robot (mask, robot-only render, robot pointmap) -> arrays + meta.

This module composes the kinematics and projection packages (like the simulator's
embedded runner): the robot description, its FK and its renders are the platform's own,
so masks here agree with what `k4d simulate` draws for the same joints.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from k4d.episodes import EpisodeMeta
from scipy.spatial.transform import Rotation

from k4d_datagen import GENERATOR
from k4d_datagen.scene import ROBOT_GROUP, SceneSpec, build_model, sample_scene
from k4d_datagen.tasks import (
    DURATION_S,
    HOME_JOINTS,
    TASKS,
    Plan,
    dense_targets,
    judge,
    plan_task,
    sample_noise,
)

PHYSICS_DT = 0.002
MAX_ATTEMPTS = 25
MIN_ROBOT_PIXELS_FRACTION = 0.01
FAILURE_KINDS = ("none", "noise", "near_miss")


@dataclass(frozen=True)
class EpisodeConfig:
    index: int
    seed: int
    task: str = "mix"  # pick | push | stack | mix
    failures: float = 0.0  # fraction of episodes made to fail (noise or near miss)
    frames: int = 49
    height: int = 480
    width: int = 720
    robot: str = "panda"

    @property
    def episode_id(self) -> str:
        return f"ep{self.index:06d}"


@functools.lru_cache(maxsize=4)
def robot_and_renderer(name: str):
    """The kinematics robot model and our projection renderer (built once per process)."""
    from k4d_kinematics.robots import load_robot
    from k4d_projection.renderer import RobotRenderer

    model = load_robot(name)
    return model, RobotRenderer.from_robot(model)


@functools.lru_cache(maxsize=4)
def robot_mesh_files(name: str) -> dict[int, str]:
    from k4d_datagen.scene import link_mesh_files

    model, renderer = robot_and_renderer(name)
    return link_mesh_files(renderer.link_meshes, name)


def episode_rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(index)]))


def _choose(config: EpisodeConfig, rng) -> tuple[str, str]:
    task = config.task if config.task != "mix" else TASKS[int(rng.integers(len(TASKS)))]
    kind = "none"
    if rng.random() < config.failures:
        kind = ("noise", "near_miss")[int(rng.integers(2))]
    return task, kind


@dataclass
class Rollout:
    scene: SceneSpec
    plan: Plan
    kind: str
    control_times: np.ndarray  # (N,)
    control_joints: np.ndarray  # (N, J)


def plan_episode(config: EpisodeConfig, rng) -> Rollout:
    """Sample scenes until one is feasible: IK reaches every target and the camera sees the robot."""
    from k4d_kinematics.fk import forward_kinematics
    from k4d_kinematics.ik import solve_ik
    from k4d_projection.camera import Camera

    model, renderer = robot_and_renderer(config.robot)
    task, kind = _choose(config, rng)
    q0 = np.array(HOME_JOINTS, np.float64)
    tcp = model.link_index("panda_hand_tcp") if "panda_hand_tcp" in model.link_names else model.link_index(model.ee_link)
    start = forward_kinematics(model, q0[None])[0, tcp]
    gripper = model.joint_names.index(model.gripper_joints[0])
    travel = float(model.upper[gripper] - model.lower[gripper])
    for _ in range(MAX_ATTEMPTS):
        scene = sample_scene(rng, task, config.width, config.height)
        plan = plan_task(scene, task, rng, kind == "near_miss", travel, start[:3, 3])
        noise = sample_noise(rng) if kind == "noise" else None
        times, targets, opening = dense_targets(plan, start, noise)
        ik = solve_ik(model, targets, link=model.link_names[tcp], seed=q0, mode="trajectory")
        if not ik.success.all():
            continue
        joints = ik.joints.copy()
        joints[:, gripper] = model.lower[gripper] + opening * travel
        camera = Camera.from_dict(scene.camera.camera_json())
        mask = renderer.render(forward_kinematics(model, joints[[0, len(joints) // 2]]), camera,
                               outputs=["mask"]).mask
        if mask.mean(axis=(1, 2)).min() < MIN_ROBOT_PIXELS_FRACTION:
            continue
        return Rollout(scene, plan, kind, times, joints)
    raise RuntimeError(f"episode {config.index}: no feasible scene in {MAX_ATTEMPTS} attempts")


def _interp(times, values, new_times):
    return np.stack([np.interp(new_times, times, values[:, j]) for j in range(values.shape[1])], -1)


class Simulation:
    """MuJoCo scene + physics of one rollout. Grasp assist: an object is attached to the
    hand while the gripper holds it (both fingers touch it and the fingers are not shut),
    and released when the gripper opens; everything else is contact physics."""

    def __init__(self, config: EpisodeConfig, rollout: Rollout):
        self.config, self.rollout = config, rollout
        self.robot, self.renderer = robot_and_renderer(config.robot)
        self.mujoco, self.model, self.link_bodies = build_model(rollout.scene, self.renderer.link_meshes,
                                                                self.robot.link_names, robot_mesh_files(config.robot))
        mj = self.mujoco
        self.data = mj.MjData(self.model)
        self.object_bodies = [mj.mj_name2id(self.model, mj.mjtObj.mjOBJ_BODY, o.name) for o in rollout.scene.objects]
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
        from k4d_kinematics.fk import forward_kinematics

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
        from k4d.mujoco_gl import linearize_depth

        mj = self.mujoco = sim.mujoco
        self.sim, self._linearize = sim, linearize_depth
        cam = sim.rollout.scene.camera
        self.width, self.height = cam.width, cam.height
        self._gl = mj.GLContext(cam.width, cam.height)
        self._gl.make_current()
        self._context = mj.MjrContext(sim.model, mj.mjtFontScale.mjFONTSCALE_150)
        mj.mjr_setBuffer(mj.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
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
        self._viewport = mj.MjrRect(0, 0, cam.width, cam.height)
        self._zero_far = self._context.readDepthMap == mj.mjtDepthMap.mjDEPTH_ZEROFAR
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
        mj.mjr_render(self._viewport, self._scene, self._context)
        mj.mjr_readPixels(self._rgb, self._depth, self._viewport, self._context)
        rgb = self._rgb[::-1].copy()
        depth, hit = self._linearize(self._depth[::-1], self._znear, self._zfar, self._zero_far)
        self._update(self._robot_only if robot_only else self._no_robot, segment=True)
        mj.mjr_render(self._viewport, self._scene, self._context)
        mj.mjr_readPixels(self._rgb, None, self._viewport, self._context)
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
        if self._context is not None:
            self._context.free()
            self._context = None
        if self._gl is not None:
            self._gl.free()
            self._gl = None


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


def generate_episode(config: EpisodeConfig, *, verify: bool = False) -> tuple[EpisodeMeta, dict[str, np.ndarray]]:
    """Arrays in the k4d.episodes schema and their meta. verify=True adds
    `_mujoco_robot_mask` (T, H, W) (MuJoCo's robot-only segmentation) and
    `_mujoco_robot_depth` for the agreement checks of tests and benchmarks."""
    from k4d_projection.camera import Camera
    from k4d_projection.renderer import CONDITION_OUTPUTS

    rng = episode_rng(config.seed, config.index)
    rollout = plan_episode(config, rng)
    sim = Simulation(config, rollout)
    scene_cam = SceneCamera(sim)
    T, H, W = config.frames, config.height, config.width
    frame_times = np.linspace(0.0, DURATION_S, T)
    rgb = np.empty((T, H, W, 3), np.uint8)
    depth = np.empty((T, H, W), np.float32)
    geoms = np.empty((T, H, W), np.int32)
    joints = np.empty((T, sim.robot.num_joints))
    poses = np.empty((T, len(sim.robot.link_names), 4, 4))
    object_poses = np.empty((T, len(rollout.scene.objects), 7))
    extra: dict[str, np.ndarray] = {}
    if verify:
        extra = {"_mujoco_robot_mask": np.empty((T, H, W), bool), "_mujoco_robot_depth": np.empty((T, H, W), np.float32)}

    def on_frame(t, link_poses, q):
        rgb[t], depth[t], geoms[t] = scene_cam.render()
        joints[t], poses[t] = q, link_poses
        object_poses[t] = sim.object_poses()
        if verify:
            _, d, g = scene_cam.render(robot_only=True)
            extra["_mujoco_robot_mask"][t], extra["_mujoco_robot_depth"][t] = g >= 0, d

    try:
        sim.run(frame_times, on_frame)
    finally:
        scene_cam.close()
    camera_json = rollout.scene.camera.camera_json()
    camera = Camera.from_dict(camera_json)
    robot = sim.renderer.render(poses, camera, outputs=CONDITION_OUTPUTS)
    success, how = judge(rollout.plan, rollout.scene, object_poses)
    fps = (T - 1) / DURATION_S if T > 1 else 1.0 / DURATION_S
    arrays = {
        "rgb": rgb, "depth": depth, "pointmap": depth_to_pointmap(depth, camera),
        "robot_mask": robot.mask, "robot_rgb": robot.rgb, "robot_pointmap": robot.pointmap,
        "joints": joints, "object_ids": object_id_image(sim, geoms, depth, robot),
        "object_poses": object_poses,
    }
    actions = {"robot": config.robot, "type": "joint_position", "dt": 1.0 / fps, "num_frames": T,
               "initial_joints": joints[0].tolist(), "steps": joints.tolist()}
    meta = EpisodeMeta(
        episode_id=config.episode_id, frames=T, height=H, width=W, fps=fps, task=rollout.plan.text,
        task_kind=rollout.plan.task, success=bool(success), success_judge=how, robot=config.robot,
        joint_names=list(sim.robot.joint_names), actions=actions, camera=camera_json,
        object_names=[o.label for o in rollout.scene.objects],
        source={"kind": "synthetic", "seed": config.seed, "index": config.index, "generator": GENERATOR,
                "failure": rollout.kind, "physics_dt": PHYSICS_DT, "duration_s": DURATION_S,
                "simulator": f"mujoco {sim.mujoco.__version__}"})
    return meta, {**arrays, **extra}
