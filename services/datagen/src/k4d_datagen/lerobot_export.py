"""`k4d datagen export DATASET_URI[#EPISODE_ID] --format lerobot OUT`: k4d episodes as a LeRobot
v3.0 dataset that `LeRobotDataset(repo_id, root=OUT)` loads, written with pyarrow and PyAV
(`lerobot` itself does not install beside our stack, ADR 003). The layout, file names, parquet
schemas and info.json keys are those lerobot 0.4.4 wrote in the committed fixture
(services/datagen/tests/fixtures/lerobot-v3.0-panda9):

    meta/info.json                                   codebase_version, fps, features, templates, counts
    meta/tasks.parquet                               task_index + the task text as the pandas index
    meta/episodes/chunk-000/file-000.parquet         per episode: length, tasks, where its rows and
                                                     video frames live, per-episode stats
    meta/stats.json                                  stats of every feature over the dataset
    data/chunk-000/file-000.parquet                  per frame: observation.state, action, timestamp,
                                                     frame_index, episode_index, index, task_index
    videos/<key>/chunk-000/file-000.mp4              AV1 (libsvtav1, crf 30, g 2: lerobot's encoder
                                                     settings), episodes back to back

observation.state = the episode's joints (float32, named by the robot's joint names);
action = the next frame's joints (the last frame repeats its own). Extras on request: the robot
mask and depth as more video keys (docs/data.md, "Exports").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
from k4d import cpu_scheduling
from k4d.episodes import open_dataset
from k4d.errors import InvalidArgument

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
CHUNKS_SIZE = 1000  # files per chunk folder
DATA_FILES_MB = 100  # a data or video file rolls over to the next one past these sizes
VIDEO_FILES_MB = 200
VCODEC, VCODEC_INFO, CRF, GOP = "libsvtav1", "av1", 30, 2
EXTRAS = ("robot_mask", "depth")
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
STATS = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
INDEX_FEATURES = ("frame_index", "episode_index", "index", "task_index")
IMAGE_STAT_FRAMES = 16  # frames per episode that image stats look at (lerobot samples too)
IMAGE_STAT_SIDE = 150  # and pixels per side, by striding


def _list(value_type):
    """list<element: T>: the field name parquet and lerobot's files use."""
    import pyarrow as pa

    return pa.list_(pa.field("element", value_type))


@dataclass
class _Video:
    """One video key: the open mp4, where it is in the chunk/file sequence, frames so far."""

    key: str
    root: Path
    fps: Fraction
    chunk: int = 0
    file: int = 0
    frames_in_file: int = 0
    container: object = None
    stream: object = None

    @property
    def path(self) -> Path:
        return self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)

    def write(self, frames: np.ndarray) -> tuple[int, int, float, float]:
        """Appends (T, H, W, 3) uint8; returns (chunk, file, from_timestamp, to_timestamp)."""
        import av

        if self.container is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.container = av.open(str(self.path), "w")
            self.stream = self.container.add_stream(VCODEC, rate=self.fps, options={"g": str(GOP), "crf": str(CRF)})
            self.stream.width, self.stream.height, self.stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        start = self.frames_in_file
        with cpu_scheduling.kept():  # SVT-AV1 as root raises it to real time
            for frame in frames:
                image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
                for packet in self.stream.encode(image):
                    self.container.mux(packet)
        self.frames_in_file += len(frames)
        where = (self.chunk, self.file, float(start / self.fps), float(self.frames_in_file / self.fps))
        # PyAV opens the file at the first muxed packet (the encoder may still hold them all).
        if self.path.is_file() and self.path.stat().st_size >= VIDEO_FILES_MB * 2**20:
            self.close()
            self.chunk, self.file = _next_file(self.chunk, self.file)
            self.frames_in_file = 0
        return where

    def close(self) -> None:
        if self.container is not None:
            with cpu_scheduling.kept():  # SVT-AV1 as root raises it to real time
                for packet in self.stream.encode():
                    self.container.mux(packet)
                self.container.close()
            self.container = self.stream = None


def _next_file(chunk: int, file: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file + 1 >= CHUNKS_SIZE else (chunk, file + 1)


@dataclass
class _Plan:
    """What the export writes, fixed before the first byte."""

    uri: str
    episode_ids: list[str]
    robot: str
    joint_names: list[str]
    height: int
    width: int
    fps: float
    camera_key: str
    extras: list[str]
    depth_max_m: float = 0.0
    tasks: dict[str, int] = field(default_factory=dict)

    def video_keys(self) -> dict[str, str]:
        """LeRobot video key -> what fills it (rgb | robot_mask | depth)."""
        camera = self.camera_key.removeprefix("observation.images.")
        keys = {self.camera_key: "rgb"}
        if "robot_mask" in self.extras:
            keys[f"observation.robot_mask.{camera}"] = "robot_mask"
        if "depth" in self.extras:
            keys[f"observation.depth.{camera}"] = "depth"
        return keys


def parse_dataset_ref(ref: str) -> tuple[str, str | None]:
    """`URI` (the whole dataset) or `URI#EPISODE_ID` (one episode)."""
    from k4d.episodes.meta import validate_episode_id

    uri, sep, episode_id = ref.rpartition("#")
    if not sep:
        return ref, None
    if not uri:
        raise InvalidArgument.for_field("episode", f"expected DATASET_URI or DATASET_URI#EPISODE_ID, got {ref!r}")
    return uri, validate_episode_id(episode_id, "episode")


def export_lerobot(ref: str, out: str | os.PathLike, *, video_key: str | None = None,
                   extras: list[str] | None = None, fps: float | None = None, progress: bool = False,
                   config=None) -> Path:
    """The dataset (or one episode) at `ref` as a LeRobot v3.0 dataset at `out` (a new or empty
    directory). video_key: the RGB key, observation.images.CAMERA or CAMERA. The files are
    written into a hidden sibling folder renamed to `out` at the end, so `out` never holds a
    half-written dataset. Returns `out`."""
    from tqdm import tqdm

    # 1. check inputs: everything the files depend on is fixed before anything is written
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidArgument.for_field("out", f"{out} exists and is not an empty directory")
    uri, episode_id = parse_dataset_ref(ref)
    dataset = open_dataset(uri, config=config)
    plan = _plan(dataset, episode_id, video_key, list(extras or []), fps)
    # 2. episodes -> data rows, video frames, per-episode stats
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its configuration to stderr unless told
    final, out = out, out.parent / f".{out.name}.partial"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)  # what an interrupted export left
    videos = {key: _Video(key, out, Fraction(plan.fps).limit_denominator(1001)) for key in plan.video_keys()}
    data = _DataWriter(out, plan)
    episodes, stats = [], []
    index = 0
    try:
        for e, eid in enumerate(tqdm(plan.episode_ids, desc="export", unit="ep", disable=not progress)):
            episode = dataset.open(eid)
            frames = _frames(episode, plan)
            columns = _columns(episode, plan, e, index, frames)
            chunk, file = data.write(columns)
            row = {"episode_index": e, "tasks": [episode.meta.task], "length": len(frames),
                   "data/chunk_index": chunk, "data/file_index": file,
                   "dataset_from_index": index, "dataset_to_index": index + len(frames)}
            episode_stats = {}
            for key, source in plan.video_keys().items():
                images = _video_frames(episode, source, frames, plan)
                v_chunk, v_file, start, end = videos[key].write(images)
                row.update({f"videos/{key}/chunk_index": v_chunk, f"videos/{key}/file_index": v_file,
                            f"videos/{key}/from_timestamp": start, f"videos/{key}/to_timestamp": end})
                episode_stats[key] = _image_stats(images)
            episode_stats.update({k: _vector_stats(v) for k, v in columns.items()})
            episodes.append(row)
            stats.append(episode_stats)
            index += len(frames)
    finally:
        for video in videos.values():
            video.close()
        data.close()
    # 3. meta: episodes, tasks, stats, info (info last: a reader plans its reads from it)
    features = _features(plan, videos)
    _write_episodes(out, episodes, stats, features)
    _write_tasks(out, plan.tasks)
    aggregated = {key: _aggregate([s[key] for s in stats]) for key in features}
    (out / "meta" / "stats.json").write_text(json.dumps(aggregated, indent=4))
    info = {"codebase_version": CODEBASE_VERSION, "robot_type": plan.robot, "total_episodes": len(episodes),
            "total_frames": index, "total_tasks": len(plan.tasks), "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": DATA_FILES_MB, "video_files_size_in_mb": VIDEO_FILES_MB,
            "fps": _fps_json(plan.fps), "splits": {"train": f"0:{len(episodes)}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH, "features": features}
    (out / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    if final.exists():
        final.rmdir()  # checked empty above
    out.rename(final)
    return final


def _plan(dataset, episode_id: str | None, video_key: str | None, extras: list[str], fps: float | None) -> _Plan:
    ids = dataset.episode_ids if episode_id is None else [episode_id]
    if episode_id is not None and episode_id not in dataset:
        raise InvalidArgument.for_field("episode", f"{episode_id!r} is not a complete episode of {dataset.uri}")
    if not ids:
        raise InvalidArgument.for_field("episode", f"{dataset.uri} holds no episodes")
    unknown = [x for x in extras if x not in EXTRAS]
    if unknown:
        raise InvalidArgument.for_field("--extras", f"unknown extras {unknown}; choose from {list(EXTRAS)}")
    metas = [dataset.meta(i) for i in ids]
    first = metas[0]
    for meta in metas[1:]:
        for name in ("robot", "joint_names", "height", "width"):
            if getattr(meta, name) != getattr(first, name):
                raise InvalidArgument.for_field(
                    "episode", f"a LeRobot dataset has one {name}: {meta.episode_id} has {getattr(meta, name)!r}, "
                               f"{first.episode_id} {getattr(first, name)!r}; export them separately (URI#EPISODE)")
    if first.height % 2 or first.width % 2 or min(first.height, first.width) < 8:
        raise InvalidArgument.for_field("episode", f"frames are {first.width}x{first.height}: LeRobot's AV1 "
                                        "(yuv420p) videos need even sizes of at least 8")
    if fps is None:
        rates = sorted({round(m.fps, 6) for m in metas})
        if len(rates) > 1:
            raise InvalidArgument.for_field(
                "--fps", f"the episodes have different frame rates {rates[:5]}; a LeRobot dataset has one: "
                         "give --fps to resample them")
        fps = metas[0].fps
    if not (np.isfinite(fps) and 0 < fps <= 1000):
        raise InvalidArgument.for_field("--fps", f"must be in (0, 1000], got {fps}")
    if "depth" in extras:
        lacking = [m.episode_id for m in metas if "depth" not in m.arrays]
        if lacking:
            raise InvalidArgument.for_field("--extras", f"depth: {lacking[0]} has no depth (imports carry none)")
    key = video_key or _camera_key(first)
    if not key.startswith("observation.images."):
        key = f"observation.images.{key}"
    tasks: dict[str, int] = {}
    for meta in metas:
        tasks.setdefault(meta.task, len(tasks))
    plan = _Plan(dataset.uri, ids, first.robot, list(first.joint_names), first.height, first.width, float(fps),
                 key, extras, tasks=tasks)
    if "depth" in extras:
        # One scale for the dataset: depth = pixel / 255 * depth_max_m (info.json records it).
        plan.depth_max_m = max(float(dataset.open(i).read("depth").max()) for i in ids) or 1.0
    return plan


def _camera_key(meta) -> str:
    """The key an imported episode's video had, else observation.images.front."""
    key = str(meta.source.get("video_key") or "")
    return key if key.startswith("observation.images.") else "observation.images.front"


def _fps_json(fps: float) -> int | float:
    return int(round(fps)) if abs(fps - round(fps)) < 1e-9 else fps


def _frames(episode, plan: _Plan) -> np.ndarray:
    """Indices of the episode's frames at the export's rate (all of them unless --fps resamples)."""
    T = episode.meta.frames
    if abs(episode.meta.fps - plan.fps) < 1e-9 * plan.fps:
        return np.arange(T)
    count = int(round((T - 1) * plan.fps / episode.meta.fps)) + 1
    return np.rint(np.linspace(0, T - 1, max(count, 1))).astype(np.int64)


def _columns(episode, plan: _Plan, e: int, start: int, frames: np.ndarray) -> dict[str, np.ndarray]:
    joints = episode.read("joints")[frames]
    action = np.concatenate([joints[1:], joints[-1:]])  # the next frame's joint targets
    T = len(frames)
    return {"observation.state": joints.astype(np.float32), "action": action.astype(np.float32),
            "timestamp": (np.arange(T) / plan.fps).astype(np.float32),
            "frame_index": np.arange(T, dtype=np.int64), "episode_index": np.full(T, e, np.int64),
            "index": np.arange(start, start + T, dtype=np.int64),
            "task_index": np.full(T, plan.tasks[episode.meta.task], np.int64)}


def _video_frames(episode, source: str, frames: np.ndarray, plan: _Plan) -> np.ndarray:
    """(T, H, W, 3) uint8 for one video key: RGB, the mask as white on black, or depth as grey."""
    if source == "rgb":
        return episode.read("rgb")[frames]
    if source == "robot_mask":
        grey = episode.read("robot_mask")[frames].astype(np.uint8) * 255
    else:
        depth = episode.read("depth")[frames]
        grey = np.clip(np.rint(depth / plan.depth_max_m * 255.0), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1)


class _DataWriter:
    """data/chunk-*/file-*.parquet: one row group per episode, rolling over past DATA_FILES_MB."""

    def __init__(self, root: Path, plan: _Plan):
        import pyarrow as pa

        J = len(plan.joint_names)
        vector = pa.list_(pa.field("element", pa.float32()), J)
        self.schema = pa.schema([("observation.state", vector), ("action", vector), ("timestamp", pa.float32()),
                                 *[(k, pa.int64()) for k in INDEX_FEATURES]],
                                metadata={"huggingface": json.dumps(_hf_features(J))})
        self.root, self.chunk, self.file, self.writer = root, 0, 0, None

    def write(self, columns: dict[str, np.ndarray]) -> tuple[int, int]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            path = self.root / DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.path, self.writer = path, pq.ParquetWriter(path, self.schema, compression="snappy")
        arrays = []
        for name in self.schema.names:
            value = columns[name]
            if value.ndim == 2:
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(value.reshape(-1)),
                                                                type=self.schema.field(name).type))
            else:
                arrays.append(pa.array(value, type=self.schema.field(name).type))
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        where = (self.chunk, self.file)
        if self.path.stat().st_size >= DATA_FILES_MB * 2**20:
            self.close()
            self.chunk, self.file = _next_file(self.chunk, self.file)
        return where

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _hf_features(J: int) -> dict:
    """The `huggingface` schema metadata `datasets` writes (its Features of the data files)."""
    vector = {"feature": {"dtype": "float32", "_type": "Value"}, "length": J, "_type": "List"}
    features = {"observation.state": vector, "action": vector, "timestamp": {"dtype": "float32", "_type": "Value"},
                **{k: {"dtype": "int64", "_type": "Value"} for k in INDEX_FEATURES}}
    fingerprint = hashlib.sha256(json.dumps(features, sort_keys=True).encode()).hexdigest()[:16]
    return {"info": {"features": features}, "fingerprint": fingerprint}


def _features(plan: _Plan, videos: dict[str, _Video]) -> dict:
    features = {}
    for key, source in plan.video_keys().items():
        info = {"video.height": plan.height, "video.width": plan.width, "video.codec": VCODEC_INFO,
                "video.pix_fmt": "yuv420p", "video.is_depth_map": source == "depth",
                "video.fps": _fps_json(plan.fps), "video.channels": 3, "has_audio": False}
        if source == "depth":
            info["video.depth_max_m"] = plan.depth_max_m  # depth = grey / 255 * depth_max_m, 0 = none
        features[key] = {"dtype": "video", "shape": [plan.height, plan.width, 3],
                         "names": ["height", "width", "channels"], "info": info}
    J = len(plan.joint_names)
    for key in ("observation.state", "action"):
        features[key] = {"dtype": "float32", "shape": [J], "names": list(plan.joint_names)}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in INDEX_FEATURES:
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _vector_stats(values: np.ndarray) -> dict:
    """lerobot's per-episode stats of a (T,) or (T, D) feature: per-column min, max, mean, std
    (population), count and quantiles."""
    x = values.reshape(len(values), -1)
    as_int = np.issubdtype(values.dtype, np.integer)
    xf = x.astype(np.float64)
    out = {"min": x.min(axis=0), "max": x.max(axis=0), "mean": xf.mean(axis=0), "std": xf.std(axis=0),
           "count": np.array([len(x)])}
    if not as_int:
        out["min"], out["max"] = out["min"].astype(np.float64), out["max"].astype(np.float64)
    for q in QUANTILES:
        out[f"q{round(q * 100):02d}"] = np.quantile(xf, q, axis=0)
    return out


def _image_stats(frames: np.ndarray) -> dict:
    """Per-channel stats of (T, H, W, 3) uint8 scaled to [0, 1], shaped (3, 1, 1) as lerobot's;
    over up to IMAGE_STAT_FRAMES frames strided to about IMAGE_STAT_SIDE pixels a side."""
    pick = np.unique(np.rint(np.linspace(0, len(frames) - 1, min(len(frames), IMAGE_STAT_FRAMES))).astype(int))
    step = max(1, max(frames.shape[1:3]) // IMAGE_STAT_SIDE)
    x = frames[pick, ::step, ::step].reshape(-1, 3).astype(np.float64) / 255.0
    out = {"min": x.min(axis=0), "max": x.max(axis=0), "mean": x.mean(axis=0), "std": x.std(axis=0)}
    for q in QUANTILES:
        out[f"q{round(q * 100):02d}"] = np.quantile(x, q, axis=0)
    out = {k: v.reshape(3, 1, 1) for k, v in out.items()}
    out["count"] = np.array([len(frames)])
    return {k: out[k] for k in STATS}


def _aggregate(stats: list[dict]) -> dict:
    """Dataset stats from episode stats as lerobot aggregates them: min of mins, max of
    maxes, count-weighted means and quantiles, pooled variance."""
    counts = np.array([s["count"][0] for s in stats], np.float64)
    w = counts / counts.sum()

    def weighted(key):
        return sum(wi * np.asarray(s[key], np.float64) for wi, s in zip(w, stats, strict=True))

    mean = weighted("mean")
    variance = sum(wi * (np.asarray(s["std"], np.float64) ** 2 + (np.asarray(s["mean"]) - mean) ** 2)
                   for wi, s in zip(w, stats, strict=True))
    out = {"min": np.min([s["min"] for s in stats], axis=0), "max": np.max([s["max"] for s in stats], axis=0),
           "mean": mean, "std": np.sqrt(variance), "count": np.array([int(counts.sum())])}
    out.update({k: weighted(k) for k in STATS if k.startswith("q")})
    return {k: np.asarray(out[k]).tolist() for k in STATS}


def _write_episodes(root: Path, rows: list[dict], stats: list[dict], features: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = [("episode_index", pa.int64()), ("tasks", _list(pa.string())), ("length", pa.int64()),
              ("data/chunk_index", pa.int64()), ("data/file_index", pa.int64()),
              ("dataset_from_index", pa.int64()), ("dataset_to_index", pa.int64())]
    for key, feature in features.items():
        if feature["dtype"] == "video":
            fields += [(f"videos/{key}/chunk_index", pa.int64()), (f"videos/{key}/file_index", pa.int64()),
                       (f"videos/{key}/from_timestamp", pa.float64()), (f"videos/{key}/to_timestamp", pa.float64())]
    columns = {name: [row[name] for row in rows] for name, _ in fields}
    for key, feature in features.items():
        for stat in STATS:
            if feature["dtype"] == "video":
                kind = _list(pa.int64()) if stat == "count" else _list(_list(_list(pa.float64())))
            elif stat == "count" or (feature["dtype"] == "int64" and stat in ("min", "max")):
                kind = _list(pa.int64())
            else:
                kind = _list(pa.float64())
            fields.append((f"stats/{key}/{stat}", kind))
            columns[f"stats/{key}/{stat}"] = [np.asarray(s[key][stat]).tolist() for s in stats]
    # One episodes file (lerobot rolls these over too, at data_files_size_in_mb; ours are small).
    fields += [("meta/episodes/chunk_index", pa.int64()), ("meta/episodes/file_index", pa.int64())]
    columns["meta/episodes/chunk_index"] = columns["meta/episodes/file_index"] = [0] * len(rows)
    schema = pa.schema(fields)
    path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pydict({name: columns[name] for name in schema.names}, schema=schema)
    pq.write_table(table, path, compression="snappy")


def _write_tasks(root: Path, tasks: dict[str, int]) -> None:
    """meta/tasks.parquet as pandas writes a DataFrame indexed by task text: lerobot reads it
    with `pd.read_parquet` and looks tasks up by that index, which the pandas metadata restores."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "str",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": "__index_level_0__", "pandas_type": "object",
                     "numpy_type": "str", "metadata": None}],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "3.1.1"}
    schema = pa.schema([("task_index", pa.int64()), ("__index_level_0__", pa.large_string())],
                       metadata={"pandas": json.dumps(pandas_meta)})
    ordered = sorted(tasks.items(), key=lambda kv: kv[1])
    table = pa.Table.from_pydict({"task_index": [i for _, i in ordered], "__index_level_0__": [t for t, _ in ordered]},
                                 schema=schema)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "meta" / "tasks.parquet", compression="snappy")
