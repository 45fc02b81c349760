"""Write and read episode datasets (layout in k4d.episodes, schema in docs/data.md).

Layout 2 (what this module writes):

    meta/info.json                  dataset-level info: format, layout, schema, fps, paths
    meta/episodes/<episode_id>.json the episode index: one small object per complete episode
    episodes/<episode_id>/          the episode's zarr group

Commit protocol: an episode's zarr group is written completely first; only then does its
index entry appear (one atomic write/PUT of a few KiB). Committing one episode therefore
costs the same at 10 or 10,000 episodes, and writers never share an object: any number
of processes (datagen workers, Indexed-Job pods) may append to one dataset at once,
local or on S3, with no locks and no appends. A crash between the group and its entry
leaves the group unlisted; readers only see listed episodes, and a resumed writer
rewrites the group from scratch.

Layout 1 (manifest.json + manifest.d/<shard>.json, each listing every EpisodeMeta and
rewritten whole on every commit) is still read as is; the first writer to open such a
dataset migrates it to layout 2 (index entries first, info.json last, then the old
manifests go).
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from k4d.episodes.location import Location, open_location
from k4d.episodes.meta import EpisodeMeta, validate_episode_id
from k4d.episodes.schema import ARRAY_SPECS, REQUIRED_ARRAYS, SCHEMA_VERSION, expected_shape
from k4d.errors import FailedPrecondition, InvalidArgument, NotFound

FORMAT = "k4d.episodes"
LAYOUT = 2
INFO = "meta/info.json"
INDEX = "meta/episodes"
SNAPSHOT = "meta/episodes.snapshot.json"
EPISODES = "episodes"
META_ATTR = "k4d_episode"
# Layout 1, read (and migrated) only.
MANIFEST = "manifest.json"
SHARD_MANIFESTS = "manifest.d"
_CHUNK_TARGET_BYTES = 4 << 20
READ_AHEAD = 256  # index entries fetched per batch by Dataset.meta
CREATION_WAIT_READS = 12  # about 4 s for a concurrent creator's info.json to appear


def _json_bytes(doc) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _load_json(data: bytes, where: str):
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument.for_field("uri", f"{where} is not valid JSON: {exc}") from None


@dataclass(frozen=True)
class DatasetInfo:
    """meta/info.json: what a reader needs before fetching any episode. Written once, by
    whoever creates the dataset, and never rewritten by a commit: counts are not stored
    but derived from the index (`Dataset.counts()`), so no object is shared by writers.
    fps: the dataset's frame rate, or None when episodes may differ (each EpisodeMeta
    keeps its own)."""

    fps: float | None = None
    format: str = FORMAT
    layout: int = LAYOUT
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return {"format": self.format, "layout": self.layout, "schema_version": self.schema_version,
                "fps": self.fps,
                "arrays": {name: {"dims": list(spec.dims), "dtype": spec.dtype.name}
                           for name, spec in ARRAY_SPECS.items()},
                "required_arrays": list(REQUIRED_ARRAYS),
                "paths": {"episode": f"{EPISODES}/{{episode_id}}",
                          "index_entry": f"{INDEX}/{{episode_id}}.json"}}

    @classmethod
    def parse(cls, data: bytes, where: str) -> DatasetInfo:
        doc = _load_json(data, where)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InvalidArgument.for_field("uri", f"{where} is not a k4d episode dataset info")
        if doc.get("layout") != LAYOUT or doc.get("schema_version") != SCHEMA_VERSION:
            raise InvalidArgument.for_field(
                "uri", f"{where} has layout {doc.get('layout')!r}, schema version "
                       f"{doc.get('schema_version')!r}; this reader knows layout {LAYOUT}, "
                       f"schema {SCHEMA_VERSION}")
        fps = doc.get("fps")
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps <= 0):
            raise InvalidArgument.for_field("uri", f"{where}: fps must be a number > 0 or null")
        return cls(fps=fps)


def _index_rel(episode_id: str) -> str:
    return f"{INDEX}/{episode_id}.json"


def _list_index(loc: Location) -> dict[str, str]:
    """Episode id -> version of its index entry, from one listing (hidden temp files of
    writes in flight are skipped)."""
    return {name[:-5]: version for name, version in loc.list_versions(INDEX).items()
            if name.endswith(".json") and not name.startswith(".")}


def _write_snapshot(loc: Location, entries: Mapping[str, tuple[str, EpisodeMeta]]) -> None:
    doc = {"format": FORMAT, "layout": LAYOUT,
           "entries": {i: {"version": v, "meta": m.to_dict()} for i, (v, m) in entries.items()}}
    loc.write_atomic(SNAPSHOT, (json.dumps(doc, sort_keys=True) + "\n").encode())


def _read_snapshot(loc: Location, versions: Mapping[str, str]) -> dict[str, dict]:
    """Raw EpisodeMeta dicts from the snapshot, for the entries whose version it recorded
    is still the current one. The snapshot is only a cache: absent, unreadable or stale,
    the entries themselves are read instead."""
    data = loc.read_bytes(SNAPSHOT)
    if data is None:
        return {}
    try:
        doc = json.loads(data)
        entries = doc["entries"] if doc.get("format") == FORMAT and doc.get("layout") == LAYOUT else {}
        return {i: e["meta"] for i, e in entries.items() if versions.get(i) == e["version"]}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def _parse_entry(data: bytes, where: str) -> EpisodeMeta:
    return EpisodeMeta.from_dict(_load_json(data, where))


def _parse_manifest(data: bytes, where: str) -> dict[str, EpisodeMeta]:
    doc = _load_json(data, where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InvalidArgument.for_field("uri", f"{where} is not a k4d episode manifest")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InvalidArgument.for_field(
            "uri", f"{where} has schema version {doc.get('schema_version')!r}; this reader knows "
                   f"{SCHEMA_VERSION}")
    metas = [EpisodeMeta.from_dict(m) for m in doc.get("episodes", [])]
    return {m.episode_id: m for m in metas}


def _read_layout1(loc: Location) -> dict[str, EpisodeMeta] | None:
    """Union of a layout-1 manifest.json and manifest.d/*.json; None when there is none."""
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


def _read_info(loc: Location) -> DatasetInfo | None:
    data = loc.read_bytes(INFO)
    return None if data is None else DatasetInfo.parse(data, f"{loc.uri}/{INFO}")


def _migrate_layout1(loc: Location, episodes: Mapping[str, EpisodeMeta]) -> DatasetInfo:
    """Layout 1 -> 2, idempotent: entries first, info.json last (the switch a reader looks
    for), then the old manifests go. A crash anywhere leaves a dataset that reads the same
    and migrates again on the next writer's open."""
    for meta in episodes.values():
        loc.write_atomic(_index_rel(meta.episode_id), _json_bytes(meta.to_dict()))
    # The snapshot keeps reading a migrated dataset one request, as its manifest was. Until
    # info.json exists no layout-2 writer touches the entries, so these versions are ours.
    versions = _list_index(loc)
    _write_snapshot(loc, {i: (versions[i], m) for i, m in episodes.items() if i in versions})
    fps = {float(m.fps) for m in episodes.values()}
    info = DatasetInfo(fps=fps.pop() if len(fps) == 1 else None)
    loc.write_atomic(INFO, _json_bytes(info.to_dict()))
    loc.remove_tree(SHARD_MANIFESTS)
    loc.remove_tree(MANIFEST)
    return info


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
    not a dataset. Any number of writers may append at once: each commit writes only the
    committed episodes' own index entries. `fps` fixes the dataset's frame rate when this
    writer creates it (every episode must then match); None leaves it per episode."""

    def __init__(self, uri: str | os.PathLike, *, fps: float | None = None, config=None):
        self._loc = open_location(uri, config)
        self.uri = self._loc.uri
        if hasattr(self._loc, "ensure_bucket"):
            self._loc.ensure_bucket()
        info = _read_info(self._loc)
        if info is None:
            old = _read_layout1(self._loc)
            if old is not None:
                info = _migrate_layout1(self._loc, old)
            elif self._loc.list_names(""):
                info = self._info_of_a_concurrent_creation()
            else:
                info = DatasetInfo(fps=None if fps is None else float(fps))
                # Same bytes from every creator with the same arguments: concurrent
                # creations agree; a conflicting fps is caught just below.
                self._loc.write_atomic(INFO, _json_bytes(info.to_dict()))
                info = _read_info(self._loc)
        if fps is not None and info.fps != float(fps):
            raise FailedPrecondition(f"{self.uri} has fps {info.fps}; this writer was asked for {fps}")
        self.info = info
        self._complete: set[str] | None = None  # listed lazily: opening stays O(1)

    def _info_of_a_concurrent_creation(self) -> DatasetInfo:
        """A location holding only meta/ (and episodes/) is a dataset another writer is
        creating right now (the pods of an Indexed Job start together): wait for its
        info.json a little. Anything else is not a dataset."""
        for attempt in range(CREATION_WAIT_READS):
            if not set(self._loc.list_names("")) <= {"meta", EPISODES}:
                break
            info = _read_info(self._loc)
            if info is not None:
                return info
            time.sleep(0.05 * (attempt + 1))
        raise InvalidArgument.for_field(
            "out", f"{self.uri} exists, is not empty and is not a k4d dataset (no {INFO})")

    @property
    def location(self) -> Location:
        return self._loc

    def has_episode(self, episode_id: str) -> bool:
        """True when the episode is complete (it has an index entry). The first call lists
        the index once (also what other writers had committed by then); this writer's own
        commits are added as they happen."""
        if self._complete is None:
            self._complete = set(_list_index(self._loc))
        return episode_id in self._complete

    def write_episode(self, meta: EpisodeMeta, arrays: Mapping[str, np.ndarray], *,
                      overwrite: bool = False, commit: bool = True) -> EpisodeMeta:
        """Validate, write the episode's group fully, then (commit=True) add its index
        entry. Returns the stored meta (with `arrays` filled in). commit=False leaves the
        listing to a later `commit([...])`, e.g. by the parent of worker processes."""
        meta = EpisodeMeta.from_dict(meta.to_dict())  # a validated copy; the caller's stays as is
        if self.info.fps is not None and float(meta.fps) != self.info.fps:
            raise InvalidArgument.for_field(
                "meta.fps", f"{self.uri} is a {self.info.fps} fps dataset; got {meta.fps}")
        checked = validate_arrays(meta, arrays)
        meta.arrays = list(checked)
        # Asked of the store itself, not the listing cached at open: another writer may
        # have completed this episode since, and a listed group must never be rewritten.
        rel = _index_rel(meta.episode_id)
        if self._loc.read_bytes(rel) is not None:
            if not overwrite:
                raise FailedPrecondition(f"episode {meta.episode_id!r} is already complete in "
                                         f"{self.uri}; pass overwrite=True to replace it")
            self._loc.remove_tree(rel)  # unlisted before its group changes
            if self._complete is not None:
                self._complete.discard(meta.episode_id)
        self._write_group(meta, checked)
        if commit:
            self.commit([meta])
        return meta

    def commit(self, metas: list[EpisodeMeta]) -> None:
        """List already written episodes as complete: one small atomic write per episode,
        whatever the dataset's size."""
        for meta in metas:
            validate_episode_id(meta.episode_id)
            self._loc.write_atomic(_index_rel(meta.episode_id), _json_bytes(meta.to_dict()))
            if self._complete is not None:
                self._complete.add(meta.episode_id)

    def compact(self) -> int:
        """Write meta/episodes.snapshot.json: every listed EpisodeMeta with the version of
        its entry, so that a reader gets them in one request instead of one per episode
        (what matters on S3). Run once at the end of a run, not per commit: it reads only
        entries changed since the last snapshot but writes all. Readers use a snapshot
        entry only while its version is current, so concurrent commits, overwrites and
        compactions stay correct (last snapshot written wins). Returns the entry count."""
        versions = _list_index(self._loc)  # listed before reading: a newer entry mismatches
        dataset, entries = Dataset(self._loc, self.info, versions), {}
        for episode_id in dataset.episode_ids:
            try:
                entries[episode_id] = (versions[episode_id], dataset.meta(episode_id))
            except NotFound:  # unlisted meanwhile by another writer's overwrite: skip it
                continue
        _write_snapshot(self._loc, entries)
        return len(entries)

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
        # Attributes last: a group with attrs has all its arrays (the index still decides).
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
    """A read-only view of the complete episodes of a dataset. Opening lists the index
    (layout 2) and reads its snapshot if there is one, or reads the manifests (layout 1);
    EpisodeMetas the snapshot does not hold are fetched when first asked for, in batches
    (concurrently on S3), all at once by `metas()` or `counts()`."""

    def __init__(self, loc: Location, info: DatasetInfo, versions: Mapping[str, str],
                 metas: dict[str, EpisodeMeta] | None = None):
        """versions: episode id -> version of its index entry (layout 1: any string)."""
        self._loc = loc
        self.uri = loc.uri
        self.info = info
        self._ids = sorted(versions)
        self._known = set(self._ids)
        self._metas: dict[str, EpisodeMeta] = dict(metas or {})
        self._cached = {} if metas is not None else _read_snapshot(loc, versions)

    @property
    def episode_ids(self) -> list[str]:
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, episode_id: str) -> bool:
        return episode_id in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self.episode_ids)

    def meta(self, episode_id: str) -> EpisodeMeta:
        if episode_id not in self._known:
            raise NotFound(f"episode {episode_id!r} is not a complete episode of {self.uri}")
        if episode_id not in self._metas:
            # Read ahead in sorted order: a loop over episode_ids costs N / READ_AHEAD
            # batched round trips, not N sequential ones.
            start = bisect.bisect_left(self._ids, episode_id)
            batch = [i for i in self._ids[start:start + READ_AHEAD] if i not in self._metas]
            self._fetch([episode_id] + [i for i in batch if i != episode_id])
        return self._metas[episode_id]

    def metas(self, episode_ids: list[str] | None = None) -> list[EpisodeMeta]:
        """EpisodeMetas of `episode_ids` (default: all), fetched in one batch."""
        ids = self._ids if episode_ids is None else list(episode_ids)
        self._fetch([i for i in ids if i in self._known and i not in self._metas])
        return [self.meta(i) for i in ids]

    def counts(self) -> dict[str, int]:
        """{"episodes": N, "frames": total frames} of the complete episodes."""
        return {"episodes": len(self._ids), "frames": sum(m.frames for m in self.metas())}

    def _fetch(self, episode_ids: list[str]) -> None:
        for episode_id in [i for i in episode_ids if i in self._cached]:
            self._metas[episode_id] = EpisodeMeta.from_dict(self._cached.pop(episode_id))
        episode_ids = [i for i in episode_ids if i not in self._metas]
        if not episode_ids:
            return
        got = self._loc.read_many([_index_rel(i) for i in episode_ids])
        for episode_id in episode_ids:
            rel = _index_rel(episode_id)
            if got[rel] is None:  # unlisted since we opened (an overwrite in progress)
                raise NotFound(f"episode {episode_id!r} is no longer listed in {self.uri}")
            self._metas[episode_id] = _parse_entry(got[rel], f"{self.uri}/{rel}")

    def open(self, episode_id: str) -> Episode:
        return Episode(self._loc, self.meta(episode_id))

    def size_bytes(self, episode_id: str) -> int:
        """Bytes stored for one episode (its zarr group)."""
        self.meta(episode_id)
        return self._loc.size_bytes(f"{EPISODES}/{episode_id}")


def open_dataset(uri: str | os.PathLike, config=None) -> Dataset:
    """Open a dataset for reading (either layout); reads its info and lists its index."""
    loc = open_location(uri, config)
    info = _read_info(loc)
    if info is not None:
        return Dataset(loc, info, _list_index(loc))
    old = _read_layout1(loc)
    if old is None:
        raise NotFound(f"{loc.uri} is not a k4d episode dataset (no {INFO} or {MANIFEST})")
    fps = {float(m.fps) for m in old.values()}
    return Dataset(loc, DatasetInfo(fps=fps.pop() if len(fps) == 1 else None),
                   dict.fromkeys(old, MANIFEST), old)


def is_dataset(uri: str | os.PathLike, config=None) -> bool:
    """True when `uri` holds a k4d episode dataset of either layout (no episode is read)."""
    loc = open_location(uri, config)
    return loc.read_bytes(INFO) is not None or loc.read_bytes(MANIFEST) is not None
