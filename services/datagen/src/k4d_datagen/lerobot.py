"""`k4d datagen import-lerobot`: LeRobot datasets (format v3.0, as `lerobot` 0.4-0.6 write
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
Which state columns are which joints: `state_map` (by the features' names, or --state-map).
End-effector states (--state-kind ee_pose) become joints through the kinematics core's IK,
which this composer already depends on for FK (pyproject; ADR 010 lists the data engine
among the composers): the runtime library holds FK but no IK.
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
from k4d_datagen.state_map import StateMapping, feature_width, parse_spec, resolve

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
    """The Camera of one episode (its own entry, else the default)."""
    from k4d.camera import Camera

    doc = cameras["episodes"].get(str(episode_index), cameras["default"])
    if doc is None:
        raise InvalidArgument.for_field("camera", f"no camera for episode {episode_index} and no default")
    return Camera.from_dict(doc, field_prefix="camera")


def _episode_features(dataset: LeRobotDataset, episode: dict, keys: list[str], cache: dict) -> dict[str, np.ndarray]:
    """{feature: (L, width) float64} of the episode's rows in frame order."""
    import pyarrow.parquet as pq

    rel = _file_rel(dataset, dataset.info["data_path"], episode)
    path = dataset.root / rel
    if path not in cache or not set(keys) <= set(cache[path]):
        if not path.is_file():
            raise InvalidArgument.for_field("path", f"{dataset.root} has no {rel} (episode {episode['episode_index']})")
        cache.clear()  # one data file at a time
        cache[path] = pq.read_table(path, columns=[*keys, "episode_index", "frame_index"]).to_pydict()
    data = cache[path]
    rows = np.flatnonzero(np.asarray(data["episode_index"]) == int(episode["episode_index"]))
    if len(rows) == 0:
        raise InvalidArgument.for_field("path", f"episode {episode['episode_index']} has no rows in {rel}")
    rows = rows[np.argsort(np.asarray(data["frame_index"])[rows], kind="stable")]
    out = {}
    for key in keys:
        width = feature_width(dataset.info["features"][key])
        values = [data[key][i] for i in rows]
        widths = {len(v) if isinstance(v, list) else 1 for v in values}
        if widths != {width}:
            raise InvalidArgument.for_field(
                "--state-key", f"{rel}: {key} has {sorted(widths)} values per frame but meta/info.json gives "
                               f"shape {dataset.info['features'][key].get('shape')}: the state width does not match")
        out[key] = np.asarray(values, np.float64).reshape(len(rows), width)
    return out


def _check_data_widths(dataset: LeRobotDataset, episodes: list[dict], keys: list[str]) -> None:
    """Before anything is written: every data file's columns have the widths info.json
    states (fixed-size lists carry it in the schema; other files are read once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {dataset.root / _file_rel(dataset, dataset.info["data_path"], e): e for e in episodes}
    for path, episode in files.items():
        if not path.is_file():
            raise InvalidArgument.for_field("path", f"{dataset.root} has no {path.relative_to(dataset.root)} "
                                            f"(episode {episode['episode_index']})")
        schema = pq.read_schema(path)
        for key in keys:
            if key not in schema.names:
                raise InvalidArgument.for_field("--state-key", f"{path.relative_to(dataset.root)} has no column {key!r}")
            kind = schema.field(key).type
            width = feature_width(dataset.info["features"][key])
            if pa.types.is_fixed_size_list(kind) and kind.list_size != width:
                raise InvalidArgument.for_field(
                    "--state-key", f"{path.relative_to(dataset.root)}: {key} has {kind.list_size} values per frame "
                                   f"but meta/info.json gives shape [{width}]: the state width does not match")
        if not all(pa.types.is_fixed_size_list(schema.field(k).type) for k in keys):
            _episode_features(dataset, episode, keys, {})


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


MAX_IK_FAILED_FRACTION = 0.02  # an ee_pose episode with more failed frames is refused


class EpisodeRefused(InvalidArgument):
    """One episode cannot be imported (its poses are out of reach); the others go on."""


@dataclass
class ImportResult:
    written: list[str]
    refused: dict[int, str]  # episode index -> the reason, one line


def import_lerobot(path, *, robot_name: str, camera_path, out_uri: str, episodes: list[int] | None = None,
                   frames: int = 49, video_key: str | None = None, state_key: str = STATE_KEY,
                   state_map: str | None = None, state_kind: str = "joints", progress: bool = True,
                   on_refused=None, config=None) -> ImportResult:
    """Import episodes (all by default) into the dataset at `out_uri`. Every input is checked
    before anything is written; an episode whose camera sees no robot stops the import before
    that episode is written. An ee_pose episode where IK fails on more than 2 % of the frames
    is refused (`on_refused(index, line)`), and the import goes on with the next one."""
    from tqdm import tqdm

    from k4d_datagen.engine import robot_and_renderer

    # 1. check inputs
    if frames < 1:
        raise InvalidArgument.for_field("frames", "must be >= 1")
    dataset = open_lerobot(path)
    robot, renderer = robot_and_renderer(robot_name)
    mapping = resolve(parse_spec(state_map), features=dataset.info["features"], state_key=state_key,
                      robot=robot, kind=state_kind)
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
        camera = _camera_for(cameras, i)
        shape = dataset.info["features"][video_key].get("shape", [camera.height, camera.width, 3])
        if (camera.height, camera.width) != (int(shape[0]), int(shape[1])):
            raise InvalidArgument.for_field("camera", f"camera is {camera.width}x{camera.height} but video "
                                            f"{video_key!r} is {shape[1]}x{shape[0]}")
    _check_data_widths(dataset, [known[i] for i in wanted], mapping.features)
    writer = DatasetWriter(out_uri, config=config)
    result = ImportResult([], {})
    data_cache: dict = {}
    video_cache: dict = {}
    # 2. per episode: states -> (IK) -> kinematics -> projection; frames from the video
    for i in tqdm(wanted, desc="import", unit="ep", disable=not progress):
        episode_id = f"lerobot-{i:06d}"
        if writer.has_episode(episode_id):
            continue
        episode = known[i]
        data = _episode_features(dataset, episode, mapping.features, data_cache)
        try:
            joints, ik = _episode_joints(robot, mapping, data, i)
        except EpisodeRefused as exc:
            result.refused[i] = str(exc)
            if on_refused is not None:
                on_refused(i, str(exc))
            continue
        pick = uniform_indices(len(joints), frames)
        meta, arrays = _build_episode(dataset, episode, episode_id, robot, renderer, cameras, joints[pick],
                                      pick, video_key, video_cache, state_key, mapping, ik)
        writer.write_episode(meta, arrays)
        result.written.append(episode_id)
    return result


def _episode_joints(robot, mapping: StateMapping, data: dict[str, np.ndarray], index: int):
    """(L, J) joints of every source frame, and the IK record (None for joint states).
    ee_pose: IK on every frame, each seeded with the previous frame's solution."""
    joints = mapping.joints(robot, data)
    if mapping.kind != "ee_pose":
        return joints, None
    from k4d_kinematics import IKOptions, solve_ik

    targets = mapping.poses(data)
    # Tighter than the IK service's default rotation tolerance (1 mrad): the import promises
    # FK within 1 mm / 1 mrad of the stated pose.
    options = IKOptions(position_tolerance=1e-4, rotation_tolerance=1e-4)
    solved = solve_ik(robot, targets, link=mapping.link, seed=joints[0], mode="trajectory", options=options)
    arm = robot.joint_indices(robot.arm_joint_names)
    joints[:, arm] = solved.joints[:, arm]
    failed = np.flatnonzero(~solved.success)
    record = {"solver": "ours", "mode": "trajectory", "link": mapping.link, "frames_solved": len(targets),
              "failed_frames": failed.tolist(),
              "max_position_error_m": float(solved.position_error.max(initial=0.0)),
              "max_rotation_error_rad": float(solved.rotation_error.max(initial=0.0))}
    if len(failed) > MAX_IK_FAILED_FRACTION * len(targets):
        shown = ", ".join(str(f) for f in failed[:10]) + (", ..." if len(failed) > 10 else "")
        raise EpisodeRefused.for_field(
            "episode", f"{index} refused: IK failed on {len(failed)} of {len(targets)} frames "
                       f"({100 * len(failed) / len(targets):.1f} % > {100 * MAX_IK_FAILED_FRACTION:.0f} %; frames "
                       f"{shown}); worst residual {record['max_position_error_m'] * 1000:.1f} mm: check the pose "
                       f"columns, the link ({mapping.link}) and T_base_from_world")
    return joints, record


def _build_episode(dataset, episode, episode_id, robot, renderer, cameras, joints, pick, video_key,
                   video_cache, state_key, mapping: StateMapping, ik: dict | None):
    from k4d.robots.fk import forward_kinematics
    from k4d.robots.validation import validate_joints
    from k4d_projection import robot_condition

    i = int(episode["episode_index"])
    joints = validate_joints(robot, joints, clip=False, field=f"episode {i} {state_key}")
    camera = _camera_for(cameras, i)
    rendered = robot_condition(renderer, forward_kinematics(robot, joints), camera)
    if not rendered.mask.any():
        raise InvalidArgument.for_field("camera", f"the camera sees no robot in episode {i} "
                                        "(check T_cam_from_world and the robot's base frame)")
    rgb = _episode_frames(dataset, episode, video_key, pick, video_cache)
    T = len(pick)
    length = int(episode.get("length", 0)) or (int(pick.max()) + 1)
    fps = dataset.fps * (T - 1) / max(length - 1, 1) if T > 1 else dataset.fps
    tasks = episode.get("tasks") or []
    task = "; ".join(str(t) for t in tasks) if isinstance(tasks, list) else str(tasks)
    source = {"kind": "lerobot", "dataset": str(dataset.root.resolve()), "episode_index": i,
              "codebase_version": dataset.info.get("codebase_version"), "video_key": video_key,
              "state_key": state_key, "source_frames": pick.tolist(), "source_length": length,
              "state_map": mapping.record(), "dropped_columns": dict(mapping.dropped), "generator": GENERATOR}
    if ik is not None:
        source["ik"] = ik
    meta = EpisodeMeta(
        episode_id=episode_id, frames=T, height=camera.height, width=camera.width, fps=float(fps),
        task=task, task_kind="import", success=None, success_judge="unlabelled (imported episode)",
        robot=robot.name, joint_names=list(robot.joint_names),
        actions={"robot": robot.name, "type": "joint_position", "dt": 1.0 / fps, "num_frames": T,
                 "initial_joints": joints[0].tolist(), "steps": joints.tolist()},
        camera=camera, object_names=[], source=source)
    arrays = {"rgb": rgb, "robot_mask": rendered.mask, "robot_rgb": rendered.rgb,
              "robot_pointmap": rendered.pointmap, "joints": joints}
    return meta, arrays
