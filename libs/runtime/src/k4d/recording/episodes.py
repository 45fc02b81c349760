"""An episode of the shared format (`k4d.episodes`) as a recording: what
`k4d datagen export --format rerun` and `k4d view <dataset>/episodes/<id>` write."""

from __future__ import annotations

from pathlib import Path

from k4d.recording.writer import write_episode_recording

_LAYERS = ("rgb", "pointmap", "robot_pointmap", "robot_mask")


def record_episode(episode, path: str | Path) -> Path:
    """episode: a `k4d.episodes.Episode` (`open_dataset(uri).open(episode_id)`). Writes its
    RGB, pointmap (valid where depth > 0 when depth is stored), robot pointmap and mask,
    joints and actions, with the episode's camera(s) and fps; returns the path."""
    meta = episode.meta
    layers = {name: episode.read(name) for name in _LAYERS if name in episode.arrays}
    if "pointmap" in layers and "depth" in episode.arrays:
        layers["mask"] = episode.read("depth") > 0
    joints = episode.read("joints") if "joints" in episode.arrays else None
    success = "unknown" if meta.success is None else str(meta.success).lower()
    return write_episode_recording(
        path, **layers, camera=meta.camera, joints=joints,
        joint_names=meta.joint_names if joints is not None else None,
        actions=meta.actions or None, fps=meta.fps, title=meta.task or meta.episode_id,
        info={"episode": meta.episode_id, "task kind": meta.task_kind, "robot": meta.robot,
              "success": f"{success} ({meta.success_judge})" if meta.success_judge else success,
              "source": meta.source.get("kind", "")})
