"""`k4d datagen import-lerobot`: LeRobot datasets (format v3.0, as `lerobot` 0.6 writes
them; v2.0/v2.1, one file per episode, too) -> episodes with EXACT robot masks, robot pointmaps and robot-only renders from our
kinematics and projection, given the robot and a camera calibration.

Layout read (REFERENCE.md section 9), with pyarrow and PyAV only (no `lerobot` import):
    meta/info.json                      fps, features, data_path / video_path templates
    meta/tasks.parquet                  task text -> task_index
    meta/episodes/chunk-*/file-*.parquet  per episode: length, tasks, data/chunk_index,
                                        data/file_index, videos/<key>/{chunk_index,file_index,
                                        from_timestamp,to_timestamp}
    data/chunk-*/file-*.parquet         per frame: observation.state, action, timestamp,
                                        frame_index, episode_index, index, task_index
    videos/<key>/chunk-*/file-*.mp4     several episodes per file, located by timestamps
v2.x: meta/episodes.jsonl instead of meta/episodes/, one data parquet and one mp4 per
episode (data/chunk-{episode_chunk}/episode_{episode_index}.parquet, videos/chunk-.../<key>/...).
Each episode is resampled uniformly to the clip length (as Robo4D-200k did). World
pointmaps and depth are absent (the format carries no depth).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from k4d.episodes import DatasetWriter, EpisodeMeta
from k4d.errors import InvalidArgument

from k4d_datagen import GENERATOR

STATE_KEY = "observation.state"


@dataclass
class LeRobotDataset:
    root: Path
    info: dict
    episodes: list[dict]  # rows of meta/episodes, sorted by episode_index
    tasks: dict[int, str]

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    def video_keys(self) -> list[str]:
        return [k for k, f in self.info.get("features", {}).items() if isinstance(f, dict) and f.get("dtype") == "video"]


def _read_parquet_rows(paths: list[Path]) -> list[dict]:
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for path in paths:
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def open_lerobot(path: str | os.PathLike) -> LeRobotDataset:
    root = Path(path)
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise InvalidArgument.for_field("path", f"{root} is not a LeRobot dataset (no meta/info.json)")
    try:
        info = json.loads(info_path.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidArgument.for_field("path", f"{info_path} is not valid JSON: {exc}") from None
    version = str(info.get("codebase_version", ""))
    if not version.startswith(("v3", "v2")):
        raise InvalidArgument.for_field("path", f"LeRobot format {version or '?'} is not supported "
                                        "(v2.0, v2.1 and v3.0 are)")
    for key in ("fps", "features", "data_path"):
        if key not in info:
            raise InvalidArgument.for_field("path", f"{info_path} has no {key!r}")
    if version.startswith("v2"):
        episodes = _read_jsonl(root / "meta" / "episodes.jsonl")
    else:
        episode_files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not episode_files:
            raise InvalidArgument.for_field("path", f"{root} has no meta/episodes/chunk-*/file-*.parquet")
        episodes = _read_parquet_rows(episode_files)
    episodes = sorted(episodes, key=lambda r: int(r["episode_index"]))
    tasks: dict[int, str] = {}
    tasks_path = root / "meta" / "tasks.parquet"
    if tasks_path.is_file():
        import pyarrow.parquet as pq

        table = pq.read_table(tasks_path)
        data = table.to_pydict()
        names = data.get("task") or data.get("__index_level_0__") or []
        for name, index in zip(names, data.get("task_index", []), strict=False):
            tasks[int(index)] = str(name)
    return LeRobotDataset(root, info, episodes, tasks)


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise InvalidArgument.for_field("path", f"{path.parent.parent} has no meta/episodes.jsonl")
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidArgument.for_field("path", f"{path} is not valid JSON lines: {exc}") from None


def _file_rel(dataset: LeRobotDataset, template: str, episode: dict, video_key: str = "") -> str:
    """A data or video path of the episode: v3 templates name chunk/file indices from the
    episode metadata, v2 templates the episode's chunk and index."""
    index = int(episode["episode_index"])
    prefix = f"videos/{video_key}/" if video_key else "data/"
    return template.format(chunk_index=int(episode.get(f"{prefix}chunk_index", 0)),
                           file_index=int(episode.get(f"{prefix}file_index", 0)),
                           episode_chunk=index // int(dataset.info.get("chunks_size", 1000)),
                           episode_index=index, video_key=video_key)


def load_cameras(path: str | os.PathLike) -> dict:
    """A DESIGN.md camera JSON (one camera for the dataset), or {"default": cam,
    "episodes": {"<episode_index>": cam, ...}} for per-episode calibrations."""
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise InvalidArgument.for_field("camera", f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidArgument.for_field("camera", f"{path} must hold a JSON object")
    if "episodes" in doc:
        return {"default": doc.get("default"), "episodes": {str(k): v for k, v in doc["episodes"].items()}}
    return {"default": doc, "episodes": {}}


def _camera_for(cameras: dict, episode_index: int):
    from k4d_projection.camera import Camera

    doc = cameras["episodes"].get(str(episode_index), cameras["default"])
    if doc is None:
        raise InvalidArgument.for_field("camera", f"no camera for episode {episode_index} and no default")
    return doc, Camera.from_dict(doc, field_prefix="camera.")


def _state_columns(dataset: LeRobotDataset, robot, state_key: str) -> np.ndarray:
    """Indices into the robot's joint vector filled by the state's columns."""
    feature = dataset.info["features"].get(state_key)
    if feature is None:
        raise InvalidArgument.for_field(
            "path", f"{dataset.root} has no joint states ({state_key!r} is not among its features "
                    f"{sorted(dataset.info['features'])})")
    width = int(np.prod(feature.get("shape", [0])))
    if width == robot.num_joints:
        return np.arange(robot.num_joints)
    if width == len(robot.arm_joint_names):
        return robot.joint_indices(robot.arm_joint_names)
    raise InvalidArgument.for_field(
        "robot", f"{state_key} has {width} values per frame but robot {robot.name!r} has "
                 f"{robot.num_joints} joints ({len(robot.arm_joint_names)} in the arm): the joint counts do not match")


def _episode_states(dataset: LeRobotDataset, episode: dict, state_key: str, cache: dict) -> np.ndarray:
    import pyarrow.parquet as pq

    rel = _file_rel(dataset, dataset.info["data_path"], episode)
    path = dataset.root / rel
    if path not in cache:
        table = pq.read_table(path, columns=[state_key, "episode_index", "frame_index"])
        cache[path] = table.to_pydict()
    data = cache[path]
    index = np.asarray(data["episode_index"]) == int(episode["episode_index"])
    order = np.argsort(np.asarray(data["frame_index"])[index], kind="stable")
    states = np.asarray([data[state_key][i] for i in np.flatnonzero(index)], np.float64)[order]
    if len(states) == 0:
        raise InvalidArgument.for_field("path", f"episode {episode['episode_index']} has no rows in {rel}")
    return states


def _episode_frames(dataset: LeRobotDataset, episode: dict, video_key: str, frame_idx: np.ndarray,
                    cache: dict) -> np.ndarray:
    """RGB frames `frame_idx` (episode frame numbers) of the episode from its video file."""
    from k4d.episodes.video import read_mp4

    template = dataset.info.get("video_path")
    if not template:
        raise InvalidArgument.for_field("path", "meta/info.json has no video_path")
    rel = _file_rel(dataset, template, episode, video_key)
    path = dataset.root / rel
    if path not in cache:
        cache.clear()  # one decoded file at a time
        cache[path] = read_mp4(path)
    video = cache[path]
    fps = float(dataset.info["features"][video_key].get("info", {}).get("video.fps", dataset.fps))
    start = int(round(float(episode.get(f"videos/{video_key}/from_timestamp", 0.0)) * fps))
    idx = start + frame_idx
    if idx.max() >= len(video):
        raise InvalidArgument.for_field("path", f"{rel} has {len(video)} frames; episode "
                                        f"{episode['episode_index']} needs frame {idx.max()}")
    return video[idx]


def uniform_indices(length: int, frames: int) -> np.ndarray:
    """`frames` indices spread uniformly over 0..length-1 (repeats when the episode is shorter)."""
    return np.rint(np.linspace(0, length - 1, frames)).astype(np.int64)


def import_lerobot(path, *, robot_name: str, camera_path, out_uri: str, episodes: list[int] | None = None,
                   frames: int = 49, video_key: str | None = None, state_key: str = STATE_KEY,
                   progress: bool = True, config=None) -> list[str]:
    """Import episodes (all by default) into the dataset at `out_uri`; returns the ids written.
    Every input is checked before anything is written; an episode whose camera sees no robot
    stops the import before that episode is written."""
    from tqdm import tqdm

    from k4d_datagen.engine import robot_and_renderer

    # 1. check inputs
    if frames < 1:
        raise InvalidArgument.for_field("frames", "must be >= 1")
    dataset = open_lerobot(path)
    robot, renderer = robot_and_renderer(robot_name)
    columns = _state_columns(dataset, robot, state_key)
    keys = dataset.video_keys()
    if video_key is None:
        if not keys:
            raise InvalidArgument.for_field("path", f"{dataset.root} has no video features")
        video_key = keys[0]
    elif video_key not in keys:
        raise InvalidArgument.for_field("video_key", f"{video_key!r} is not a video of this dataset; it has {keys}")
    cameras = load_cameras(camera_path)
    known = {int(e["episode_index"]): e for e in dataset.episodes}
    wanted = sorted(known) if not episodes else list(episodes)
    missing = [i for i in wanted if i not in known]
    if missing:
        raise InvalidArgument.for_field("episodes", f"episodes {missing} are not in {dataset.root} (it has {sorted(known)})")
    for i in wanted:
        _, camera = _camera_for(cameras, i)
        shape = dataset.info["features"][video_key].get("shape", [camera.height, camera.width, 3])
        if (camera.height, camera.width) != (int(shape[0]), int(shape[1])):
            raise InvalidArgument.for_field("camera", f"camera is {camera.width}x{camera.height} but video "
                                            f"{video_key!r} is {shape[1]}x{shape[0]}")
    writer = DatasetWriter(out_uri, config=config)
    written: list[str] = []
    data_cache: dict = {}
    video_cache: dict = {}
    # 2. per episode: states -> kinematics -> projection; frames from the video
    for i in tqdm(wanted, desc="import", unit="ep", disable=not progress):
        episode_id = f"lerobot-{i:06d}"
        if writer.has_episode(episode_id):
            continue
        episode = known[i]
        states = _episode_states(dataset, episode, state_key, data_cache)
        pick = uniform_indices(len(states), frames)
        joints = np.tile(robot.mid_configuration, (frames, 1))
        joints[:, columns] = states[pick]
        meta, arrays = _build_episode(dataset, episode, episode_id, robot, renderer, cameras, joints,
                                      pick, video_key, video_cache, state_key)
        writer.write_episode(meta, arrays)
        written.append(episode_id)
    return written


def _build_episode(dataset, episode, episode_id, robot, renderer, cameras, joints, pick, video_key,
                   video_cache, state_key):
    from k4d_kinematics.fk import forward_kinematics
    from k4d_kinematics.validation import validate_joints
    from k4d_projection.renderer import CONDITION_OUTPUTS

    i = int(episode["episode_index"])
    joints = validate_joints(robot, joints, clip=False, field=f"episode {i} {state_key}")
    camera_doc, camera = _camera_for(cameras, i)
    rendered = renderer.render(forward_kinematics(robot, joints), camera, outputs=CONDITION_OUTPUTS)
    if not rendered.mask.any():
        raise InvalidArgument.for_field("camera", f"the camera sees no robot in episode {i} "
                                        "(check T_cam_from_world and the robot's base frame)")
    rgb = _episode_frames(dataset, episode, video_key, pick, video_cache)
    T = len(pick)
    length = int(episode.get("length", 0)) or (int(pick.max()) + 1)
    fps = dataset.fps * (T - 1) / max(length - 1, 1) if T > 1 else dataset.fps
    tasks = episode.get("tasks") or []
    task = "; ".join(str(t) for t in tasks) if isinstance(tasks, list) else str(tasks)
    meta = EpisodeMeta(
        episode_id=episode_id, frames=T, height=camera.height, width=camera.width, fps=float(fps),
        task=task, task_kind="import", success=None, success_judge="unlabelled (imported episode)",
        robot=robot.name, joint_names=list(robot.joint_names),
        actions={"robot": robot.name, "type": "joint_position", "dt": 1.0 / fps, "num_frames": T,
                 "initial_joints": joints[0].tolist(), "steps": joints.tolist()},
        camera=camera_doc, object_names=[],
        source={"kind": "lerobot", "dataset": str(dataset.root), "episode_index": i,
                "codebase_version": dataset.info.get("codebase_version"), "video_key": video_key,
                "source_frames": pick.tolist(), "source_length": length, "generator": GENERATOR})
    arrays = {"rgb": rgb, "robot_mask": rendered.mask, "robot_rgb": rendered.rgb,
              "robot_pointmap": rendered.pointmap, "joints": joints}
    return meta, arrays
