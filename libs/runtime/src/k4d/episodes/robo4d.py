"""The Robo4D-200k directory layout (REFERENCE.md section 3), read and written, so the
official tooling reads our episodes and we read theirs.

    <root>/first_frames/<n>.png        frame 0 (RGB)
    <root>/videos/<n>.mp4              RGB video
    <root>/pointmap/<n>.mp4            8-bit Kinema4D world pointmap (k4d.pointmap_codec)
    <root>/pointmap/<n>.json           our per-frame centre/scale metadata (absent in theirs)
    <root>/mask_videos/<n>.mp4         robot-only RGB, black background
    <root>/mask_pointmap/<n>.mp4       8-bit robot pointmap
    <root>/mask_pointmap/<n>.json      its centre/scale metadata
    <root>/train_shuffled.txt          one `videos/<n>.mp4` per line
    <root>/train_img_shuffled.txt      one `first_frames/<n>.png` per line

Our videos are lossless (libx264rgb crf 0) so the 8-bit codes decode back to metric
points with the metadata; official files are lossy and carry no metadata, so for them
only the normalised [-1, 1] coordinates are available (`pointmap` is None).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from k4d import pointmap_codec as codec
from k4d.episodes.meta import validate_episode_id
from k4d.episodes.video import read_mp4, write_mp4
from k4d.errors import InvalidArgument, NotFound

TRAIN_LIST = "train_shuffled.txt"
TRAIN_IMAGE_LIST = "train_img_shuffled.txt"
FOLDERS = ("first_frames", "videos", "pointmap", "mask_videos", "mask_pointmap")


@dataclass
class Robo4DSample:
    """One clip of the layout. `*_u8` are the stored 8-bit codes (T, H, W, 3); `pointmap`
    and `robot_pointmap` are metric float32 (camera frame of each frame, zeros off the mask)
    when our metadata is beside them, else None. robot_mask (T, H, W) bool is where the
    robot pointmap codes are non-zero (the robot-only video's black background agrees)."""

    name: str
    first_frame: np.ndarray
    rgb: np.ndarray
    robot_rgb: np.ndarray
    pointmap_u8: np.ndarray | None
    robot_pointmap_u8: np.ndarray
    robot_mask: np.ndarray
    pointmap: np.ndarray | None
    robot_pointmap: np.ndarray | None
    pointmap_meta: dict | None
    robot_pointmap_meta: dict | None


def _metadata(encoded: codec.EncodedPointmap, name: str, folder: str) -> dict:
    return {
        "format": codec.FORMAT_8BIT, "version": codec.FORMAT_VERSION,
        "video": f"{folder}/{name}.mp4", "video_codec": "libx264rgb crf 0 (lossless)",
        "frame": "first_frame_camera_opencv", "units": "metres",
        "clip_percentiles": list(codec.CLIP_PERCENTILES),
        "decode": "p_cam0 = (code / 127.5 - 1) * scale[t] + centre[t]; codes (0, 0, 0) carry no point",
        "centre": encoded.centre.tolist(), "scale": encoded.scale.tolist(),
        "T_cam0_from_cam": encoded.T_cam0_from_cam.tolist(),
    }


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_json(path: Path, doc: dict) -> None:
    _write_text(path, json.dumps(doc, indent=1) + "\n")


def _write_png(path: Path, image: np.ndarray) -> None:
    from PIL import Image

    tmp = path.with_name(f".{path.name}.tmp.png")
    Image.fromarray(np.ascontiguousarray(image)).save(tmp)
    os.replace(tmp, path)


def _append_line(path: Path, line: str) -> None:
    lines = path.read_text().splitlines() if path.is_file() else []
    if line not in lines:
        _write_text(path, "\n".join([*lines, line]) + "\n")


def write_sample(root: str | os.PathLike, name: str, *, rgb: np.ndarray, robot_rgb: np.ndarray,
                 robot_mask: np.ndarray, robot_pointmap: np.ndarray, fps: float,
                 pointmap: np.ndarray | None = None, T_world_from_cam: np.ndarray | None = None) -> Path:
    """Write one clip into the layout at `root` (created if missing) and list it last.

    rgb/robot_rgb (T, H, W, 3) uint8; robot_mask (T, H, W) bool; robot_pointmap/pointmap
    (T, H, W, 3) float32 camera frame, metres; T_world_from_cam (T, 4, 4) for a moving
    camera (None = static). Without `pointmap` (imports without depth) no pointmap/ files
    are written for this clip."""
    validate_episode_id(name, "name")
    root = Path(root)
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    _write_png(root / "first_frames" / f"{name}.png", rgb[0])
    write_mp4(root / "videos" / f"{name}.mp4", rgb, fps)
    write_mp4(root / "mask_videos" / f"{name}.mp4", np.where(robot_mask[..., None], robot_rgb, 0).astype(np.uint8), fps)
    clips = [("mask_pointmap", robot_pointmap, robot_mask)]
    if pointmap is not None:
        clips.append(("pointmap", pointmap, np.any(pointmap != 0, axis=-1)))
    for folder, points, mask in clips:
        encoded = codec.encode_8bit(points, mask, T_world_from_cam)
        write_mp4(root / folder / f"{name}.mp4", encoded.values, fps)
        _write_json(root / folder / f"{name}.json", _metadata(encoded, name, folder))
    # Listed last: a clip in the lists has all its files.
    _append_line(root / TRAIN_IMAGE_LIST, f"first_frames/{name}.png")
    _append_line(root / TRAIN_LIST, f"videos/{name}.mp4")
    return root


def write_episode(root: str | os.PathLike, episode, name: str | None = None) -> Path:
    """Export a k4d.episodes Episode into the layout (name defaults to its episode id)."""
    from k4d.pointmap_codec import invert_rigid

    meta = episode.meta
    T_world_from_cam = None
    if isinstance(meta.camera, list):
        T_world_from_cam = invert_rigid(np.stack([c.T_cam_from_world for c in meta.camera]))
    return write_sample(root, name or meta.episode_id, rgb=episode.read("rgb"),
                        robot_rgb=episode.read("robot_rgb"), robot_mask=episode.read("robot_mask"),
                        robot_pointmap=episode.read("robot_pointmap"), fps=meta.fps,
                        pointmap=episode.read("pointmap") if "pointmap" in episode else None,
                        T_world_from_cam=T_world_from_cam)


class Robo4DLayout:
    """Reads a Robo4D-200k style root (ours or the official one)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        listing = self.root / TRAIN_LIST
        if not listing.is_file():
            raise NotFound(f"{self.root} is not a Robo4D layout (no {TRAIN_LIST})")
        self.names = [Path(line.strip()).stem for line in listing.read_text().splitlines() if line.strip()]

    def __len__(self) -> int:
        return len(self.names)

    def read(self, name: str) -> Robo4DSample:
        if name not in self.names:
            raise NotFound(f"{name!r} is not listed in {self.root / TRAIN_LIST}")
        path = self.root
        rgb = read_mp4(path / "videos" / f"{name}.mp4")
        first = path / "first_frames" / f"{name}.png"
        first_frame = np.asarray(_read_png(first)) if first.is_file() else rgb[0]
        robot_rgb = read_mp4(path / "mask_videos" / f"{name}.mp4")
        robot_u8 = read_mp4(path / "mask_pointmap" / f"{name}.mp4")
        robot_mask = codec.mask_from_values(robot_u8)
        robot_meta = _read_meta(path / "mask_pointmap" / f"{name}.json")
        robot_points = _decode(robot_u8, robot_mask, robot_meta)
        scene_video = path / "pointmap" / f"{name}.mp4"
        scene_u8 = scene_meta = scene_points = None
        if scene_video.is_file():
            scene_u8 = read_mp4(scene_video)
            scene_meta = _read_meta(path / "pointmap" / f"{name}.json")
            scene_points = _decode(scene_u8, codec.mask_from_values(scene_u8), scene_meta)
        return Robo4DSample(name, first_frame, rgb, robot_rgb, scene_u8, robot_u8, robot_mask,
                            scene_points, robot_points, scene_meta, robot_meta)


def _read_png(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _read_meta(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidArgument.for_field("path", f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != codec.FORMAT_8BIT:
        raise InvalidArgument.for_field("path", f"{path} is not k4d pointmap metadata")
    return doc


def _decode(values: np.ndarray, mask: np.ndarray, meta: dict | None) -> np.ndarray | None:
    if meta is None:
        return None
    T = values.shape[0]
    centre, scale = np.asarray(meta["centre"], np.float64), np.asarray(meta["scale"], np.float64)
    T_cam0 = np.asarray(meta["T_cam0_from_cam"], np.float64)
    if centre.shape != (T, 3) or scale.shape != (T,) or T_cam0.shape != (T, 4, 4):
        raise InvalidArgument.for_field("metadata", f"centre/scale/T_cam0_from_cam do not match {T} frames")
    return codec.decode(codec.EncodedPointmap(values, centre, scale, mask, T_cam0))


def read_robo4d(root: str | os.PathLike) -> Robo4DLayout:
    return Robo4DLayout(root)
