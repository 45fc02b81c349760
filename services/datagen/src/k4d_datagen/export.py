"""`k4d datagen export`: one episode as a lossless NPZ, as `k4d simulate` inputs, into
the Robo4D-200k layout, or as a Rerun recording (EPISODE is written `DATASET_URI#EPISODE_ID`);
a whole dataset or one episode as a LeRobot v3.0 dataset (`lerobot_export`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from k4d.episodes import Episode, open_dataset
from k4d.episodes.meta import validate_episode_id
from k4d.errors import InvalidArgument

FORMATS = ("npz", "simulate-inputs", "robo4d", "rerun", "lerobot")
NPZ_ARRAYS = ("rgb", "depth", "pointmap", "robot_mask", "robot_rgb", "robot_pointmap", "joints")


def parse_episode_ref(ref: str) -> tuple[str, str]:
    """`URI#EPISODE_ID` -> (uri, episode_id)."""
    uri, sep, episode_id = ref.rpartition("#")
    if not sep or not uri:
        raise InvalidArgument.for_field("episode", f"expected DATASET_URI#EPISODE_ID, got {ref!r}")
    return uri, validate_episode_id(episode_id, "episode")


def open_episode(ref: str, config=None) -> Episode:
    uri, episode_id = parse_episode_ref(ref)
    return open_dataset(uri, config=config).open(episode_id)


def export_npz(episode: Episode, out: str | os.PathLike) -> Path:
    """Keys rgb, depth, pointmap, robot_mask, robot_rgb, robot_pointmap, joints, joint_names,
    camera (JSON string), robot, actions (JSON string), task, success; plus fps, episode_id,
    object_ids/object_poses/object_names (synthetic). depth/pointmap are absent when the
    episode has none (imports without depth); success is -1 when unknown."""
    meta = episode.meta
    arrays = {name: episode.read(name) for name in NPZ_ARRAYS if name in episode}
    for name in ("object_ids", "object_poses"):
        if name in episode:
            arrays[name] = episode.read(name)
    arrays.update(
        joint_names=np.array(meta.joint_names), camera=np.array(json.dumps(meta.to_dict()["camera"])),
        robot=np.array(meta.robot), actions=np.array(json.dumps(meta.actions)), task=np.array(meta.task),
        success=np.array(-1 if meta.success is None else int(meta.success), np.int8),
        fps=np.array(meta.fps), episode_id=np.array(meta.episode_id),
        object_names=np.array(meta.object_names, dtype=str))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, out)
    return out


def export_simulate_inputs(episode: Episode, out_dir: str | os.PathLike) -> Path:
    """scene.png (frame 0), actions.json (joint positions of every frame), camera.json,
    inputs.json (robot, frames, height, width) for
    `k4d simulate --robot R --actions DIR/actions.json --image DIR/scene.png --camera DIR/camera.json --frames T`."""
    from PIL import Image

    meta = episode.meta
    if isinstance(meta.camera, list):
        raise InvalidArgument.for_field("episode", "`k4d simulate` takes one static camera; this "
                                        "episode's camera moves")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    Image.fromarray(episode["rgb"][0]).save(out / "scene.png")
    joints = episode.read("joints")
    actions = {**meta.actions, "robot": meta.robot, "type": "joint_position", "num_frames": meta.frames,
               "dt": 1.0 / meta.fps, "initial_joints": joints[0].tolist(), "steps": joints.tolist()}
    files = {"actions.json": actions, "camera.json": meta.camera.to_dict(),
             "inputs.json": {"robot": meta.robot, "frames": meta.frames, "height": meta.height,
                             "width": meta.width, "episode_id": meta.episode_id, "task": meta.task}}
    for name, doc in files.items():
        (out / name).write_text(json.dumps(doc, indent=1) + "\n")
    return out


def export_robo4d(episode: Episode, root: str | os.PathLike) -> Path:
    from k4d.episodes.robo4d import write_episode

    return write_episode(root, episode)


def export_rerun(episode: Episode, out: str | os.PathLike) -> Path:
    """The episode as a Rerun recording (docs/viewing.md), opened by `k4d view OUT.rrd`."""
    from k4d.recording import record_episode

    return record_episode(episode, out)


def export(ref: str, fmt: str, out: str, config=None, **lerobot_options) -> Path:
    """lerobot_options (video_key, extras, fps, progress) go to the LeRobot export only."""
    if fmt not in FORMATS:
        raise InvalidArgument.for_field("format", f"unknown format {fmt!r}; one of {list(FORMATS)}")
    if fmt == "lerobot":
        from k4d_datagen.lerobot_export import export_lerobot

        return export_lerobot(ref, out, config=config, **lerobot_options)
    given = [k for k, v in lerobot_options.items() if v not in (None, [], False)]
    if given:
        raise InvalidArgument.for_field(f"--{given[0].replace('_', '-')}", "applies to --format lerobot only")
    if fmt == "rerun":
        from k4d.recording import require_rerun

        if Path(out).suffix != ".rrd":
            raise InvalidArgument.for_field("out", f"a Rerun recording is written to a .rrd file, got {out!r}")
        require_rerun()
    episode = open_episode(ref, config)
    return {"npz": export_npz, "simulate-inputs": export_simulate_inputs, "robo4d": export_robo4d,
            "rerun": export_rerun}[fmt](episode, out)
