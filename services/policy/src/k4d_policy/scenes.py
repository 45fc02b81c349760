"""Evaluation scenes: the data engine's randomised tabletop scenes (`k4d_tabletop`), drawn
at the world model's clip size, plus the robot resources both worlds share.

Scene `index` of a task under `seed` depends on (seed, index, task) only, so every policy
meets the same scenes and a rerun (or another pod of the Indexed Job) rebuilds them. Use
seeds the world model was not trained on (the demo model: datagen seed 1013; its held-out
split 9013): `k4d policy-eval --seed 7000` draws held-out scenes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from k4d_tabletop.scene import SceneSpec, sample_scene
from k4d_tabletop.tasks import HOME_JOINTS, TASKS, Plan, plan_task

MAX_ATTEMPTS = 25
MIN_ROBOT_PIXELS_FRACTION = 0.01
# examples/demo_heldout: `k4d datagen synthetic --seed 9013 --framing workspace` episode 0
DEMO_SEED, DEMO_INDEX, DEMO_FRAMING = 9013, 0, "workspace"


@dataclass
class Scenario:
    """One scene with its task: `plan.text` is what the policy is told, `plan.goal` is what
    the physics judge checks (never shown to the policy)."""

    episode_id: str
    seed: int
    index: int
    task: str
    scene: SceneSpec
    plan: Plan
    initial_joints: np.ndarray

    @property
    def camera_json(self) -> dict:
        return self.scene.camera.camera().to_dict()


@dataclass
class RobotBundle:
    robot: object       # k4d.robots RobotModel
    renderer: object    # k4d_projection RobotRenderer (the robot condition, our meshes)
    mesh_files: dict    # link index -> MuJoCo STL (decimated copies of the same meshes)
    tcp_link: str


@functools.lru_cache(maxsize=4)
def robot_bundle(name: str = "panda") -> RobotBundle:
    from k4d.robots.descriptions import load_robot
    from k4d_projection import RobotRenderer
    from k4d_tabletop.scene import link_mesh_files

    robot = load_robot(name)
    renderer = RobotRenderer.from_robot(robot)
    tcp = "panda_hand_tcp" if "panda_hand_tcp" in robot.link_names else robot.ee_link
    return RobotBundle(robot, renderer, link_mesh_files(renderer.link_meshes, name), tcp)


def _feasible(bundle: RobotBundle, scene: SceneSpec, plan: Plan, q0: np.ndarray) -> bool:
    """The scripted plan's keyframes are reachable and the camera sees the robot."""
    from k4d.robots.fk import forward_kinematics
    from k4d_kinematics import solve_ik
    from k4d_tabletop.tasks import tcp_pose

    targets = np.stack([tcp_pose(k.xyz, k.yaw) for k in plan.keyframes[1:]])
    ik = solve_ik(bundle.robot, targets, link=bundle.tcp_link, seed=q0, mode="trajectory")
    if not ik.success.all():
        return False
    camera = scene.camera.camera()
    mask = bundle.renderer.render(forward_kinematics(bundle.robot, q0[None]), camera, outputs=["mask"]).mask
    return float(mask.mean()) >= MIN_ROBOT_PIXELS_FRACTION


def _draw(rng, task: str, height: int, width: int, bundle: RobotBundle,
          framing: str = "wide") -> tuple[SceneSpec, Plan]:
    from k4d.robots.fk import forward_kinematics

    robot = bundle.robot
    q0 = np.array(HOME_JOINTS, np.float64)
    start = forward_kinematics(robot, q0[None])[0, robot.link_index(bundle.tcp_link)]
    gripper = robot.joint_names.index(robot.gripper_joints[0])
    travel = float(robot.upper[gripper] - robot.lower[gripper])
    for _ in range(MAX_ATTEMPTS):
        scene = sample_scene(rng, task, width, height, framing)
        plan = plan_task(scene, task, rng, False, travel, start[:3, 3])
        if _feasible(bundle, scene, plan, q0):
            return scene, plan
    raise RuntimeError(f"no feasible {task} scene in {MAX_ATTEMPTS} attempts")


def scenario(seed: int, index: int, task: str, height: int, width: int, robot: str = "panda",
             framing: str = "wide") -> Scenario:
    """Scene `index` of `task` under `seed` at the clip size (height, width), seen by a camera
    of `framing` (k4d_tabletop.scene.FRAMINGS)."""
    bundle = robot_bundle(robot)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), TASKS.index(task)]))
    scene, plan = _draw(rng, task, height, width, bundle, framing)
    return Scenario(f"{task}-s{seed}-{index:04d}", seed, index, task, scene, plan,
                    np.array(HOME_JOINTS, np.float64))


def demo_scenario(height: int = 96, width: int = 144, robot: str = "panda") -> Scenario:
    """The shipped demo scene (examples/demo_heldout): episode 0 of `k4d datagen synthetic
    --seed 9013 --task mix --failures 0.25 --framing workspace`, redrawn with the data engine's random stream
    (task, failure kind, then scenes until one is feasible) at the clip size."""
    from k4d_tabletop.tasks import sample_noise

    bundle = robot_bundle(robot)
    rng = np.random.default_rng(np.random.SeedSequence([DEMO_SEED, DEMO_INDEX]))
    task = TASKS[int(rng.integers(len(TASKS)))]
    near_miss = noise = False
    if rng.random() < 0.25:
        kind = ("noise", "near_miss")[int(rng.integers(2))]
        near_miss, noise = kind == "near_miss", kind == "noise"
    from k4d.robots.fk import forward_kinematics

    q0 = np.array(HOME_JOINTS, np.float64)
    start = forward_kinematics(bundle.robot, q0[None])[0, bundle.robot.link_index(bundle.tcp_link)]
    gripper = bundle.robot.joint_names.index(bundle.robot.gripper_joints[0])
    travel = float(bundle.robot.upper[gripper] - bundle.robot.lower[gripper])
    for _ in range(MAX_ATTEMPTS):
        scene = sample_scene(rng, task, width, height, DEMO_FRAMING)
        plan = plan_task(scene, task, rng, near_miss, travel, start[:3, 3])
        if noise:
            sample_noise(rng)
        if _feasible(bundle, scene, plan, q0):
            # The judge checks the task's true goal, whatever the recorded episode did.
            true_plan = plan_task(scene, task, np.random.default_rng(0), False, travel, start[:3, 3])
            return Scenario(f"demo-{task}", DEMO_SEED, DEMO_INDEX, task, scene, true_plan, q0)
    raise RuntimeError("the demo scene could not be redrawn")
