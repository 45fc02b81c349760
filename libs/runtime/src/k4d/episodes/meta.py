"""EpisodeMeta: the per-episode metadata, stored as the zarr group's attrs and echoed in
the manifest. Stored as plain JSON (`to_dict`), so other languages read it too; in memory the
camera is a `k4d.camera.Camera` (the one camera type and its one validator)."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from k4d.camera import Camera, cameras_from_json
from k4d.episodes.schema import SCHEMA_VERSION
from k4d.errors import InvalidArgument

_EPISODE_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=+@,-]{0,199}$")


def validate_episode_id(episode_id: str, field_name: str = "episode_id") -> str:
    if not isinstance(episode_id, str) or not _EPISODE_ID.match(episode_id):
        raise InvalidArgument.for_field(
            field_name, f"episode ids are 1-200 characters of [A-Za-z0-9_.=+@,-] not starting "
                        f"with '.', '-' or the like; got {episode_id!r}")
    return episode_id


@dataclass
class EpisodeMeta:
    """Metadata of one episode (docs/data.md lists every field).

    camera: a Camera, or a list of them (one per frame) for a moving camera; the DESIGN.md
    camera JSON (or a list of it) is accepted and parsed by `Camera.from_dict`.
    actions: the `k4d simulate` actions JSON document reproducing the episode.
    success: None when unknown (imports without a label); success_judge says how it was judged.
    """

    episode_id: str
    frames: int
    height: int
    width: int
    fps: float
    task: str
    task_kind: str
    success: bool | None
    success_judge: str
    robot: str
    joint_names: list[str]
    actions: dict
    camera: Camera | list[Camera]
    object_names: list[str] = field(default_factory=list)
    source: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    arrays: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.camera = cameras_from_json(self.camera, "meta.camera")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: the camera in its DESIGN.md JSON form."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["camera"] = ([_camera_json(c) for c in self.camera] if isinstance(self.camera, list)
                         else _camera_json(self.camera))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeMeta:
        if not isinstance(data, dict):
            raise InvalidArgument.for_field("meta", f"expected an object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise InvalidArgument.for_field("meta", f"unknown fields {unknown}")
        try:
            meta = cls(**data)
        except TypeError as exc:
            raise InvalidArgument.for_field("meta", str(exc)) from None
        meta.validate()
        return meta

    def validate(self) -> EpisodeMeta:
        """Types and ranges of every field; InvalidArgument naming the first bad one."""
        validate_episode_id(self.episode_id, "meta.episode_id")
        for name in ("frames", "height", "width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument.for_field(f"meta.{name}", f"must be an integer >= 1, got {value!r}")
        if isinstance(self.fps, bool) or not isinstance(self.fps, (int, float)) \
                or not math.isfinite(self.fps) or self.fps <= 0:
            raise InvalidArgument.for_field("meta.fps", f"must be a finite number > 0, got {self.fps!r}")
        for name in ("task", "task_kind", "success_judge", "robot"):
            if not isinstance(getattr(self, name), str):
                raise InvalidArgument.for_field(f"meta.{name}", "must be a string")
        if self.success is not None and not isinstance(self.success, bool):
            raise InvalidArgument.for_field("meta.success", "must be true, false or null")
        for name in ("joint_names", "object_names", "arrays"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidArgument.for_field(f"meta.{name}", "must be a list of strings")
        if not self.joint_names:
            raise InvalidArgument.for_field("meta.joint_names", "must name at least one joint")
        for name in ("actions", "source"):
            if not isinstance(getattr(self, name), dict):
                raise InvalidArgument.for_field(f"meta.{name}", "must be an object")
        self.camera = cameras_from_json(self.camera, "meta.camera")  # may be replaced since __init__
        if isinstance(self.camera, list) and len(self.camera) != self.frames:
            raise InvalidArgument.for_field(
                "meta.camera", f"a per-frame camera list needs {self.frames} entries, got {len(self.camera)}")
        if self.schema_version != SCHEMA_VERSION:
            raise InvalidArgument.for_field(
                "meta.schema_version", f"this reader knows schema {SCHEMA_VERSION}, got {self.schema_version!r}")
        return self

    def camera_at(self, t: int) -> Camera:
        """The camera of frame t (the same one for a static camera)."""
        return self.camera[t] if isinstance(self.camera, list) else self.camera


def _camera_json(camera):
    # A field set after construction is passed on as it is; `validate` names what is wrong.
    return camera.to_dict() if isinstance(camera, Camera) else copy.deepcopy(camera)

