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
from k4d_tabletop.physics import (
    PHYSICS_DT,
    SceneCamera,
    depth_to_pointmap,
    object_id_image,
)
from k4d_tabletop.physics import Simulation as _PhysicsSimulation
from k4d_tabletop.scene import SceneShift, SceneSpec, sample_scene
from k4d_tabletop.tasks import (
    DURATION_S,
    HOME_JOINTS,
    TASKS,
    Plan,
    dense_targets,
    judge,
    plan_task,
    sample_noise,
)

from k4d_datagen import GENERATOR

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
    framing: str = "wide"  # k4d_tabletop.scene.FRAMINGS
    scene_shift: SceneShift = SceneShift()

    @property
    def episode_id(self) -> str:
        return f"ep{self.index:06d}"


@functools.lru_cache(maxsize=4)
def robot_and_renderer(name: str):
    """The kinematics robot model and our projection renderer (built once per process)."""
    from k4d.robots.descriptions import load_robot
    from k4d_projection import RobotRenderer

    model = load_robot(name)
    return model, RobotRenderer.from_robot(model)


@functools.lru_cache(maxsize=4)
def robot_mesh_files(name: str) -> dict[int, str]:
    from k4d_tabletop.scene import link_mesh_files

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
    from k4d.robots.fk import forward_kinematics
    from k4d_kinematics import solve_ik

    model, renderer = robot_and_renderer(config.robot)
    task, kind = _choose(config, rng)
    q0 = np.array(HOME_JOINTS, np.float64)
    tcp = model.link_index("panda_hand_tcp") if "panda_hand_tcp" in model.link_names else model.link_index(model.ee_link)
    start = forward_kinematics(model, q0[None])[0, tcp]
    gripper = model.joint_names.index(model.gripper_joints[0])
    travel = float(model.upper[gripper] - model.lower[gripper])
    for _ in range(MAX_ATTEMPTS):
        scene = sample_scene(rng, task, config.width, config.height, config.framing,
                             config.scene_shift)
        plan = plan_task(scene, task, rng, kind == "near_miss", travel, start[:3, 3])
        noise = sample_noise(rng) if kind == "noise" else None
        times, targets, opening = dense_targets(plan, start, noise)
        ik = solve_ik(model, targets, link=model.link_names[tcp], seed=q0, mode="trajectory")
        if not ik.success.all():
            continue
        joints = ik.joints.copy()
        joints[:, gripper] = model.lower[gripper] + opening * travel
        camera = scene.camera.camera()
        mask = renderer.render(forward_kinematics(model, joints[[0, len(joints) // 2]]), camera,
                               outputs=["mask"]).mask
        if mask.mean(axis=(1, 2)).min() < MIN_ROBOT_PIXELS_FRACTION:
            continue
        return Rollout(scene, plan, kind, times, joints)
    raise RuntimeError(f"episode {config.index}: no feasible scene in {MAX_ATTEMPTS} attempts")


class Simulation(_PhysicsSimulation):
    """The tabletop physics (`k4d_tabletop.physics.Simulation`) of one planned
    episode, with the robot and its meshes from the kinematics and projection packages."""

    def __init__(self, config: EpisodeConfig, rollout: Rollout):
        robot, self.renderer = robot_and_renderer(config.robot)
        super().__init__(rollout.scene, robot, self.renderer.link_meshes, robot_mesh_files(config.robot),
                         rollout)
        self.config = config


def generate_episode(config: EpisodeConfig, *, verify: bool = False) -> tuple[EpisodeMeta, dict[str, np.ndarray]]:
    """Arrays in the k4d.episodes schema and their meta. verify=True adds
    `_mujoco_robot_mask` (T, H, W) (MuJoCo's robot-only segmentation) and
    `_mujoco_robot_depth` for the agreement checks of tests and benchmarks."""
    from k4d_projection import robot_condition

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
    camera = rollout.scene.camera.camera()
    robot = robot_condition(sim.renderer, poses, camera)  # the projection stage's core
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
        joint_names=list(sim.robot.joint_names), actions=actions, camera=camera,
        object_names=[o.label for o in rollout.scene.objects],
        source={"kind": "synthetic", "seed": config.seed, "index": config.index, "generator": GENERATOR,
                "failure": rollout.kind, "physics_dt": PHYSICS_DT, "duration_s": DURATION_S,
                "framing": config.framing, "scene_shift": str(config.scene_shift),
                "simulator": f"mujoco {sim.mujoco.__version__}",
                # the task's goal (world x, y): a judge of a rollout checks it as the data
                # engine's own judge does (k4d_tabletop.judge's goal_xy; k4d_eval.policy)
                "goal_xy": [float(v) for v in rollout.plan.goal["xy"]]})
    return meta, {**arrays, **extra}
