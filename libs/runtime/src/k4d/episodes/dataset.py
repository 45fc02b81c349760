"""Write and read episode datasets (layout in k4d.episodes, schema in docs/data.md).

Commit protocol: an episode's zarr group is written completely first; only then is the
manifest rewritten (one atomic replace/PUT) to list it. A crash in between leaves the
group unlisted; readers only ever see listed episodes, and a resumed writer rewrites the
group from scratch. Each manifest file has one writer: a single process, or one shard
of a parallel job writing `manifest.d/<shard>.json`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping

import numpy as np

from k4d.episodes.location import Location, open_location
from k4d.episodes.meta import EpisodeMeta, validate_episode_id
from k4d.episodes.schema import ARRAY_SPECS, REQUIRED_ARRAYS, SCHEMA_VERSION, expected_shape
from k4d.errors import FailedPrecondition, InvalidArgument, NotFound

MANIFEST = "manifest.json"
SHARD_MANIFESTS = "manifest.d"
EPISODES = "episodes"
FORMAT = "k4d.episodes"
META_ATTR = "k4d_episode"
_CHUNK_TARGET_BYTES = 4 << 20
_SHARD = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def _manifest_bytes(episodes: Mapping[str, EpisodeMeta]) -> bytes:
    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION,
           "episodes": [episodes[k].to_dict() for k in sorted(episodes)]}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _parse_manifest(data: bytes, where: str) -> dict[str, EpisodeMeta]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument.for_field("uri", f"{where} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InvalidArgument.for_field("uri", f"{where} is not a k4d episode manifest")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InvalidArgument.for_field(
            "uri", f"{where} has schema version {doc.get('schema_version')!r}; this reader knows "
                   f"{SCHEMA_VERSION}")
    metas = [EpisodeMeta.from_dict(m) for m in doc.get("episodes", [])]
    return {m.episode_id: m for m in metas}


def _read_all_manifests(loc: Location) -> dict[str, EpisodeMeta] | None:
    """Union of manifest.json and manifest.d/*.json; None when manifest.json is absent."""
    data = loc.read_bytes(MANIFEST)
    if data is None:
        return None
    episodes = _parse_manifest(data, f"{loc.uri}/{MANIFEST}")
    for name in loc.list_names(SHARD_MANIFESTS):
        if name.endswith(".json") and not name.startswith("."):
            rel = f"{SHARD_MANIFESTS}/{name}"
            shard = loc.read_bytes(rel)
            if shard is not None:
                episodes.update(_parse_manifest(shard, f"{loc.uri}/{rel}"))
    return episodes


def frames_per_chunk(frame_bytes: int, frames: int) -> int:
    """A few frames per chunk, about 4 MiB; never more than the episode."""
    return int(max(1, min(frames, _CHUNK_TARGET_BYTES // max(frame_bytes, 1))))


def validate_arrays(meta: EpisodeMeta, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Check names, shapes, dtypes and finiteness against the schema; returns the arrays
    in schema order, floats cast to the schema's width."""
    unknown = sorted(set(arrays) - set(ARRAY_SPECS))
    if unknown:
        raise InvalidArgument.for_field("arrays", f"unknown arrays {unknown}; known: {list(ARRAY_SPECS)}")
    missing = [name for name in REQUIRED_ARRAYS if name not in arrays]
    if missing:
        raise InvalidArgument.for_field("arrays", f"missing required arrays {missing}")
    sizes = {"T": meta.frames, "H": meta.height, "W": meta.width,
             "J": len(meta.joint_names), "K": len(meta.object_names)}
    out = {}
    for name, spec in ARRAY_SPECS.items():
        if name not in arrays:
            continue
        array = np.asarray(arrays[name])
        want = expected_shape(name, sizes)
        if array.shape != want:
            raise InvalidArgument.for_field(f"arrays.{name}", f"expected shape {want}, got {array.shape}")
        if array.dtype != spec.dtype:
            if not (array.dtype.kind == "f" and spec.dtype.kind == "f"):
                raise InvalidArgument.for_field(f"arrays.{name}", f"expected dtype {spec.dtype}, got {array.dtype}")
            array = array.astype(spec.dtype)
        if spec.dtype.kind == "f" and not np.isfinite(array).all():
            raise InvalidArgument.for_field(f"arrays.{name}", "must be finite (use 0 for invalid pixels)")
        out[name] = array
    return out


class DatasetWriter:
    """Creates a dataset at `uri` or appends to one; refuses a non-empty location that is
    not a dataset. `shard` names this writer's own manifest (manifest.d/<shard>.json) for
    jobs in which several processes write one dataset at once."""

    def __init__(self, uri: str | os.PathLike, *, shard: str | None = None, config=None):
        if shard is not None and not _SHARD.match(str(shard)):
            raise InvalidArgument.for_field("shard", f"use [A-Za-z0-9_.-], got {shard!r}")
        self._loc = open_location(uri, config)
        self.uri = self._loc.uri
        if hasattr(self._loc, "ensure_bucket"):
            self._loc.ensure_bucket()
        existing = _read_all_manifests(self._loc)
        if existing is None:
            if self._loc.list_names(""):
                raise InvalidArgument.for_field(
                    "out", f"{self.uri} exists, is not empty and is not a k4d dataset (no {MANIFEST})")
            self._loc.write_atomic(MANIFEST, _manifest_bytes({}))
            existing = {}
        self._manifest_rel = MANIFEST if shard is None else f"{SHARD_MANIFESTS}/{shard}.json"
        own = self._loc.read_bytes(self._manifest_rel)
        self._own = _parse_manifest(own, f"{self.uri}/{self._manifest_rel}") if own else {}
        self._others = {k: v for k, v in existing.items() if k not in self._own}

    @property
    def location(self) -> Location:
        return self._loc

    def has_episode(self, episode_id: str) -> bool:
        """True when the episode is complete (listed in a manifest)."""
        return episode_id in self._own or episode_id in self._others

    def write_episode(self, meta: EpisodeMeta, arrays: Mapping[str, np.ndarray], *,
                      overwrite: bool = False, commit: bool = True) -> EpisodeMeta:
        """Validate, write the episode's group fully, then (commit=True) list it in the
        manifest. Returns the stored meta (with `arrays` filled in). commit=False leaves
        the listing to a later `commit([...])` by the one process that owns the manifest."""
        meta = EpisodeMeta.from_dict(meta.to_dict())  # a validated copy; the caller's stays as is
        checked = validate_arrays(meta, arrays)
        meta.arrays = list(checked)
        if self.has_episode(meta.episode_id):
            if not overwrite:
                raise FailedPrecondition(f"episode {meta.episode_id!r} is already complete in "
                                         f"{self.uri}; pass overwrite=True to replace it")
            if meta.episode_id not in self._own:
                raise FailedPrecondition(f"episode {meta.episode_id!r} belongs to another "
                                         "shard's manifest; it cannot be replaced from this one")
            self._own.pop(meta.episode_id)
            self._write_manifest()
        self._write_group(meta, checked)
        if commit:
            self.commit([meta])
        return meta

    def commit(self, metas: list[EpisodeMeta]) -> None:
        """List already written episodes as complete (one atomic manifest rewrite)."""
        for meta in metas:
            validate_episode_id(meta.episode_id)
            self._own[meta.episode_id] = meta
            self._others.pop(meta.episode_id, None)
        self._write_manifest()

    def _write_manifest(self) -> None:
        self._loc.write_atomic(self._manifest_rel, _manifest_bytes(self._own))

    def _write_group(self, meta: EpisodeMeta, arrays: dict[str, np.ndarray]) -> None:
        import zarr
        from zarr.codecs import BloscCodec

        rel = f"{EPISODES}/{meta.episode_id}"
        self._loc.remove_tree(rel)  # leftovers of a crashed attempt
        group = zarr.open_group(self._loc.zarr_store(rel, read_only=False), mode="w", zarr_format=3)
        for name, array in arrays.items():
            frame_bytes = int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize
            chunks = (frames_per_chunk(frame_bytes, array.shape[0]),) + array.shape[1:]
            shuffle = "bitshuffle" if array.dtype == np.bool_ else "shuffle"
            group.create_array(name, shape=array.shape, dtype=array.dtype, chunks=chunks,
                               compressors=BloscCodec(cname="zstd", clevel=1, shuffle=shuffle),
                               fill_value=0, dimension_names=_dimension_names(name))
            group[name][...] = array
        # Attributes last: a group with attrs has all its arrays (the manifest still decides).
        group.attrs.update({META_ATTR: meta.to_dict()})

    def close(self) -> None:
        self._loc.close()


def _dimension_names(name: str) -> tuple[str, ...]:
    return tuple(d if isinstance(d, str) else "c" for d in ARRAY_SPECS[name].dims)


class Episode:
    """One complete episode, read lazily: `ep["rgb"][t0:t1]` reads only those frames."""

    def __init__(self, loc: Location, meta: EpisodeMeta):
        import zarr

        self.meta = meta
        self._group = zarr.open_group(loc.zarr_store(f"{EPISODES}/{meta.episode_id}", read_only=True),
                                      mode="r", zarr_format=3)

    @property
    def arrays(self) -> list[str]:
        return list(self.meta.arrays)

    def __contains__(self, name: str) -> bool:
        return name in self.meta.arrays

    def __getitem__(self, name: str):
        """The zarr array `name` (slicing returns numpy arrays)."""
        if name not in self.meta.arrays:
            raise NotFound(f"episode {self.meta.episode_id!r} has no array {name!r}; "
                           f"it has {self.meta.arrays}")
        return self._group[name]

    def read(self, name: str) -> np.ndarray:
        return self[name][...]


class Dataset:
    """A read-only view of the complete episodes of a dataset (from its manifests)."""

    def __init__(self, loc: Location, episodes: dict[str, EpisodeMeta]):
        self._loc = loc
        self.uri = loc.uri
        self._episodes = episodes

    @property
    def episode_ids(self) -> list[str]:
        return sorted(self._episodes)

    def __len__(self) -> int:
        return len(self._episodes)

    def __contains__(self, episode_id: str) -> bool:
        return episode_id in self._episodes

    def __iter__(self) -> Iterator[str]:
        return iter(self.episode_ids)

    def meta(self, episode_id: str) -> EpisodeMeta:
        try:
            return self._episodes[episode_id]
        except KeyError:
            raise NotFound(f"episode {episode_id!r} is not a complete episode of {self.uri}") from None

    def open(self, episode_id: str) -> Episode:
        return Episode(self._loc, self.meta(episode_id))

    def size_bytes(self, episode_id: str) -> int:
        """Bytes stored for one episode (its zarr group)."""
        self.meta(episode_id)
        return self._loc.size_bytes(f"{EPISODES}/{episode_id}")


def open_dataset(uri: str | os.PathLike, config=None) -> Dataset:
    """Open a dataset for reading; reads only its manifest files."""
    loc = open_location(uri, config)
    episodes = _read_all_manifests(loc)
    if episodes is None:
        raise NotFound(f"{loc.uri} is not a k4d episode dataset (no {MANIFEST})")
    return Dataset(loc, episodes)
