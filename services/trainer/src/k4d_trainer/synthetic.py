"""Small synthetic episode datasets in the shared `k4d.episodes` format, for tests,
benchmarks and demos without `k4d datagen`: a bar (the "robot") sweeps across the image
and pushes a coloured block; the scene pointmap is a tilted plane with both on it.
Contents vary with the episode index, so a model can tell episodes apart."""

from __future__ import annotations

import numpy as np


def synthetic_episode(index: int, frames: int = 9, height: int = 40, width: int = 56,
                      objects: bool = False):
    """(meta, arrays) of a scene whose content depends on `index`: a coloured block the
    robot (a bar sweeping across) pushes, a tilted plane as the scene pointmap. With
    `objects`, the block's pixel ids (1; the robot 0, the rest -1) and its pose in each frame
    (camera = world; what a tracks target reads, k4d_trainer.object_flow)."""
    from k4d.camera import Camera
    from k4d.episodes import EpisodeMeta

    rng = np.random.default_rng(index)
    colour = rng.integers(60, 255, size=3)
    t = np.arange(frames)[:, None, None]
    yy, xx = (g[None] for g in np.mgrid[0:height, 0:width])
    bar_x = (4 + (index % 3) + t * (width - 12) / frames).astype(int)
    robot = (np.abs(xx - bar_x) < 3) & (yy > height // 3)
    block_x = np.maximum(width // 2 + (index % 5), bar_x + 4)
    block = (np.abs(xx - block_x) < 5) & (np.abs(yy - 2 * height // 3) < 5)
    rgb = np.zeros((frames, height, width, 3), np.uint8) + np.uint8(40 + 10 * (index % 4))
    rgb[block] = colour
    rgb[np.broadcast_to(robot, rgb.shape[:3])] = (200, 200, 210)
    z = 1.0 + 0.01 * yy + 0.002 * xx + 0.05 * block - 0.1 * robot
    pointmap = np.stack(np.broadcast_arrays((xx - width / 2) * z / 50.0,
                                            (yy - height / 2) * z / 50.0, z), -1)
    pointmap = np.broadcast_to(pointmap, (frames, height, width, 3)).astype(np.float32)
    mask = np.broadcast_to(robot, (frames, height, width)).copy()
    robot_rgb = np.where(mask[..., None], rgb, 0).astype(np.uint8)
    robot_pm = np.where(mask[..., None], pointmap, 0).astype(np.float32)
    camera = Camera(width=width, height=height, fx=50.0, fy=50.0, cx=(width - 1) / 2,
                    cy=(height - 1) / 2)
    meta = EpisodeMeta(episode_id=f"ep{index:03d}", frames=frames, height=height, width=width,
                       fps=10.0, task="push the block", task_kind="push", success=True,
                       success_judge="synthetic", robot="bar", joint_names=["x"],
                       actions={"type": "joint_positions"}, camera=camera,
                       source={"kind": "synthetic", "seed": index})
    arrays = {"rgb": rgb, "pointmap": pointmap, "robot_mask": mask, "robot_rgb": robot_rgb,
              "robot_pointmap": robot_pm, "joints": bar_x[:, 0, :1].astype(np.float64)}
    if objects:
        ids = np.full((frames, height, width), -1, np.int16)
        ids[np.broadcast_to(block, ids.shape)] = 1
        ids[mask] = 0
        centre = np.minimum(block_x[:, 0, 0], width - 1)
        poses = np.zeros((frames, 1, 7))
        poses[:, 0, :3] = pointmap[np.arange(frames), 2 * height // 3, centre]  # its centre
        poses[:, 0, 6] = 1.0  # identity quaternion (x, y, z, w)
        arrays.update(object_ids=ids, object_poses=poses)
        meta.object_names = ["block"]
    return meta, arrays


def write_dataset(root, count: int = 4, objects: bool = False, **size) -> str:
    from k4d.episodes import DatasetWriter

    writer = DatasetWriter(str(root))
    for i in range(count):
        meta, arrays = synthetic_episode(i, objects=objects, **size)
        writer.write_episode(meta, arrays)
    writer.close()
    return str(root)
