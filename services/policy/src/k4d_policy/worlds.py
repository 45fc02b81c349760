"""Two worlds behind one interface, stepped closed-loop by `k4d_policy.runner`:

- `PhysicsWorld`: the data engine's MuJoCo scene (`k4d_tabletop.physics`), the robot's
  links as mocap bodies driven exactly by kinematics, objects under contact and gravity;
  judged by the physics object-pose judge (`k4d_tabletop.tasks.judge`).
- `WorldModelWorld`: the world model continues the rollout chunk by chunk from its last
  generated frame; the robot is drawn exactly by kinematics (FK + our projection of the
  robot, the generator's condition); judged by the automatic pointmap judge (`k4d_tabletop.judge`).

Both start from the same first frame: the MuJoCo render of the scene with the robot at its
initial joints. The interface: `reset() -> Observation`, `step(joints (n, J)) ->
Observation` (the robot reaches joints[k] at frame t + 1 + k), `judge() -> dict`,
`clip() -> {"rgb": (T, H, W, 3) uint8, ...}`, `close()`.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
from k4d.settings import current as current_settings

from k4d_policy.policies import Observation
from k4d_policy.scenes import RobotBundle, Scenario

REPO_MODELS = Path(__file__).resolve().parents[4] / "models"
DEFAULT_MODEL_ENV = "K4D_DEFAULT_MODEL"


class _SceneRender:
    """The scene in MuJoCo, rendered by its camera: RGB, metric pointmap, object ids."""

    def __init__(self, scenario: Scenario, bundle: RobotBundle):
        from k4d.camera import Camera
        from k4d_tabletop.physics import SceneCamera, Simulation

        self.scenario, self.bundle = scenario, bundle
        self.camera = Camera.from_dict(scenario.camera_json)
        self.sim = Simulation(scenario.scene, bundle.robot, bundle.renderer.link_meshes, bundle.mesh_files)
        self.sim.start(scenario.initial_joints)
        self.view = SceneCamera(self.sim)

    def render(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> rgb (H, W, 3) uint8, pointmap (H, W, 3) float32 camera frame, geom ids (H, W)."""
        from k4d_tabletop.physics import depth_to_pointmap

        rgb, depth, geom = self.view.render()
        return rgb, depth_to_pointmap(depth, self.camera), geom

    def object_ids(self, depth_geom) -> np.ndarray:
        """(H, W) int16 object ids (-1 none, 0 robot, k >= 1 object k) of the current frame."""
        from k4d.robots.fk import forward_kinematics
        from k4d_tabletop.physics import object_id_image

        pointmap, geom = depth_geom
        robot = self.bundle.renderer.render(forward_kinematics(self.bundle.robot, self.sim.q[None]), self.camera,
                                            outputs=["mask", "depth"])
        return object_id_image(self.sim, geom[None], pointmap[None, ..., 2], robot)[0]

    def close(self) -> None:
        self.view.close()


class PhysicsWorld:
    name = "physics"

    def __init__(self, scenario: Scenario, bundle: RobotBundle, dt_s: float):
        self.scenario, self.bundle, self.dt_s = scenario, bundle, dt_s
        self._render: _SceneRender | None = None

    def reset(self) -> Observation:
        self.close()
        self._render = _SceneRender(self.scenario, self.bundle)
        self.t = 0
        self._rgb, self._pointmap, self._poses, self._joints = [], [], [], []
        return self._record()

    def _record(self) -> Observation:
        sim = self._render.sim
        rgb, pointmap, _ = self._render.render()
        self._rgb.append(rgb)
        self._pointmap.append(pointmap)
        self._poses.append(sim.object_poses())
        self._joints.append(sim.q.copy())
        return Observation(rgb, pointmap, sim.q.copy(), self.t)

    def step(self, joints: np.ndarray) -> Observation:
        sim = self._render.sim
        obs = None
        for q in np.asarray(joints, np.float64):
            self.t += 1
            sim.advance(np.array([self.t * self.dt_s]), q[None])
            obs = self._record()
        return obs

    def judge(self) -> dict:
        from k4d_tabletop.tasks import judge

        ok, how = judge(self.scenario.plan, self.scenario.scene, np.stack(self._poses))
        return {"success": bool(ok), "rule": how}

    def clip(self) -> dict:
        return {"rgb": np.stack(self._rgb), "joints": np.stack(self._joints)}

    def close(self) -> None:
        if self._render is not None:
            self._render.close()
            self._render = None


# --- the world model ------------------------------------------------------------------


def default_model_ref() -> str:
    """The model `k4d simulate` uses without --model ('' = none): $K4D_DEFAULT_MODEL, else
    the shipped models/demo-small when its manifest says "default": true (its weights dir)."""
    import json

    value = current_settings().models.default_model
    if value:
        return "" if value == "static-world" else value
    manifest = REPO_MODELS / "demo-small" / "manifest.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if data.get("default") is True:
            return str(REPO_MODELS / "demo-small" / data.get("weights_dir", "weights"))
    return ""


def resolve_model_ref(ref: str) -> str:
    """A shipped model folder (manifest.json + weights dir) -> its k4d model directory."""
    import json

    path = Path(ref)
    if (path / "manifest.json").is_file() and not (path / "k4d_model.json").exists():
        return str(path / json.loads((path / "manifest.json").read_text()).get("weights_dir", "weights"))
    return ref


class WorldModel:
    """The generator's model, loaded once per process through the generator's ModelManager
    (the loading API the embedded simulator uses); `generate` samples one clip."""

    def __init__(self, ref: str | None = None, device: str = "cpu"):
        from k4d.errors import FailedPrecondition
        from k4d_generator import ModelManager

        ref = resolve_model_ref(ref or default_model_ref())
        if not ref:
            raise FailedPrecondition("no world model: give --model or ship a default model "
                                     "(models/demo-small) or set K4D_DEFAULT_MODEL")
        store = None
        if not Path(ref).exists():  # a registry model lives in the object store
            from k4d.config import load_config
            from k4d.store import open_store

            store = open_store(config=load_config())
        self.manager = ModelManager(store, device=device, allow_static_world=False, warm_up=False)
        self.loaded = self.manager.load(ref, "torch")
        info = self.loaded.pipeline.info
        self.ref, self.name = ref, f"{info.name}/{info.version}"
        self.clip_shape = (int(info.num_frames), int(info.height), int(info.width))
        # A pipeline that takes the scene's current points (an RGB-D observation) keeps them
        # where nothing changes: the world passes its current pointmap when it does.
        self._takes_points = "initial_pointmap" in inspect.signature(self.manager.generate).parameters

    def generate(self, image, robot, seed: int, pointmap=None, T_cam_from_base=None, tool=None):
        """T_cam_from_base and tool (k4d.tool.ToolTrack): the camera's pose and the tool's
        track: a refiner with scene planes reads the pose; the track is the model's to use."""
        kwargs = {"initial_pointmap": np.asarray(pointmap, np.float32)} if self._takes_points and pointmap is not None \
            else {}
        result = self.manager.generate(image, robot.rgb, robot.pointmap, robot.mask, seed=int(seed),
                                       T_cam_from_base=T_cam_from_base, tool=tool, **kwargs)
        if result.metadata.get("pointmap_units", "metres") != "metres":
            from k4d.errors import FailedPrecondition

            raise FailedPrecondition(f"model {self.name} decodes normalised pointmaps; the judge needs metres")
        return result


class WorldModelWorld:
    name = "world_model"

    def __init__(self, scenario: Scenario, bundle: RobotBundle, model: WorldModel, dt_s: float, seed: int = 0):
        from k4d.camera import Camera

        self.scenario, self.bundle, self.model, self.dt_s, self.seed = scenario, bundle, model, dt_s, seed
        self.camera = Camera.from_dict(scenario.camera_json)

    def reset(self) -> Observation:
        from k4d_tabletop.judge import start_positions

        render = _SceneRender(self.scenario, self.bundle)
        try:
            rgb, pointmap, geom = render.render()
            self.object_ids0 = render.object_ids((pointmap, geom))
            # the scene it set up: the judge reads the objects' displacements from it
            self.start_xyz = start_positions(render.sim.object_poses())
        finally:
            render.close()
        self.t, self.chunks = 0, 0
        self._holding = False  # the gripper holds an object where the next clip starts
        self.q = np.asarray(self.scenario.initial_joints, np.float64)
        self._image, self._pointmap = rgb, pointmap
        self._rgb, self._pm, self._mask, self._joints = [], [], [], [self.q.copy()]
        self._first = (rgb, pointmap)
        return Observation(rgb, pointmap, self.q.copy(), 0)

    def step(self, joints: np.ndarray) -> Observation:
        """Generate the frames of one action chunk. While the episode fits in one clip (the
        evaluator's episodes do), the clip is generated again from the first frame with every
        joint so far, the chunk's, then held, and the chunk's frames are kept: the model sees
        the whole episode, so a grasp or push that spans two chunks is one contact and no
        generated frame is fed back as input. Past one clip it continues from the last
        generated frame (and pointmap), telling the model what a grasp it reported (its
        metadata's `contacts`) still holds."""
        from k4d.robots.fk import forward_kinematics
        from k4d.tool import tool_track
        from k4d_projection import CONDITION_OUTPUTS

        joints = np.asarray(joints, np.float64)
        T = self.model.clip_shape[0]
        room = T - 1 - self.t  # frames the clip from the first frame still has
        if room > 0:
            n, offset = min(len(joints), room), self.t
            q = np.concatenate([np.stack(self._joints), joints[:n]])
            (image, pointmap), holding, seed = self._first, False, self.seed * 1000
        else:
            n, offset = min(len(joints), T - 1), 0
            q = np.concatenate([self.q[None], joints[:n]])
            image, pointmap = self._image, self._pointmap
            holding, seed = self._holding, self.seed * 1000 + self.chunks
        q = np.concatenate([q, np.repeat(q[-1:], T - len(q), 0)])  # the robot holds after the chunk
        poses = forward_kinematics(self.bundle.robot, q)
        robot = self.bundle.renderer.render(poses, self.camera, outputs=CONDITION_OUTPUTS)
        result = self.model.generate(np.ascontiguousarray(image), robot, seed=seed,
                                     pointmap=pointmap, T_cam_from_base=self.camera.T_cam_from_base,
                                     tool=tool_track(self.bundle.robot, q, poses, holding=holding))
        if not self._rgb:  # the judge reads frame 0 as the model decodes it (one source per clip)
            self._rgb.append(result.rgb[0])
            self._pm.append(result.pointmap[0])
            self._mask.append(robot.mask[0])
        kept = slice(offset + 1, offset + n + 1)
        self._rgb.extend(result.rgb[kept])
        self._pm.extend(result.pointmap[kept])
        self._mask.extend(robot.mask[kept])
        self._joints.extend(q[kept])
        end = offset + n
        self.t += n
        self.chunks += 1
        self.q = q[end].copy()
        self._image, self._pointmap = result.rgb[end], result.pointmap[end]
        # a grasp still closed at the chunk's last frame goes on in a continued clip
        # (k4d.tool.ToolTrack.holding)
        self._holding = any(c["kind"] == "grasp" and c["grasp_frame"] <= end < c["release_frame"]
                            for c in result.metadata.get("contacts", []))
        obs = Observation(result.rgb[end], result.pointmap[end], self.q.copy(), self.t)
        if n < len(joints):  # a chunk longer than the clip has room for: continue with the rest
            return self.step(joints[n:])
        return obs

    def judge(self) -> dict:
        from k4d_tabletop.judge import JudgeClip, judge

        pm = np.stack(self._pm)
        clip = JudgeClip(np.stack(self._rgb), pm, np.abs(pm).sum(-1) > 0, np.stack(self._mask))
        verdict = judge(clip, self.object_ids0, self.scenario.task, self.camera.T_cam_from_world,
                        self.scenario.plan.text, goal_xy=self.scenario.plan.goal.get("xy"),
                        start_xyz=self.start_xyz)
        out = {k: v for k, v in verdict.items() if isinstance(v, (bool, int, float, str, type(None)))}
        out["success"] = bool(verdict["success"]) if verdict["success"] is not None else None
        return out

    def clip(self) -> dict:
        return {"rgb": np.stack(self._rgb), "joints": np.stack(self._joints)}

    def close(self) -> None:
        pass
