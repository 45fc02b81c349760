"""k4d.episodes: the shared episode format on a local directory and on a real S3 server."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from k4d.config import load_config
from k4d.episodes import SCHEMA_VERSION, DatasetWriter, EpisodeMeta, open_dataset
from k4d.episodes import dataset as dataset_mod
from k4d.episodes.location import LocalLocation
from k4d.errors import FailedPrecondition, InvalidArgument, NotFound

T, H, W, J, K = 5, 8, 12, 3, 2


def make_episode(episode_id: str, seed: int = 0, *, full: bool = True):
    rng = np.random.default_rng(seed)
    meta = EpisodeMeta(
        episode_id=episode_id, frames=T, height=H, width=W, fps=10.0, task="push the red box",
        task_kind="push", success=bool(seed % 2), success_judge="object displacement > 5 cm",
        robot="panda", joint_names=[f"j{i}" for i in range(J)],
        actions={"type": "joint_positions", "joint_names": ["j0", "j1", "j2"], "values": [[0.0] * J] * T},
        camera={"width": W, "height": H, "fx": 10.0, "fy": 10.0, "cx": 5.5, "cy": 3.5,
                "T_cam_from_world": np.eye(4).tolist()},
        object_names=["box", "mug"][:K], source={"kind": "synthetic", "seed": seed})
    mask = rng.random((T, H, W)) > 0.5
    arrays = {
        "rgb": rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8),
        "robot_mask": mask,
        "robot_rgb": rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8) * mask[..., None],
        "robot_pointmap": (rng.normal(size=(T, H, W, 3)) * mask[..., None]).astype(np.float32),
        "joints": rng.normal(size=(T, J)),
    }
    if full:
        arrays.update({
            "depth": rng.uniform(0.5, 2.0, (T, H, W)).astype(np.float32),
            "pointmap": rng.normal(size=(T, H, W, 3)).astype(np.float32),
            "object_ids": rng.integers(-1, K + 1, (T, H, W), dtype=np.int16),
            "object_poses": rng.normal(size=(T, K, 7)),
        })
    return meta, arrays


def check_round_trip(uri, config=None):
    writer = DatasetWriter(uri, config=config)
    metas = {}
    for i, full in ((0, True), (1, False)):
        meta, arrays = make_episode(f"ep{i}", seed=i, full=full)
        stored = writer.write_episode(meta, arrays)
        metas[meta.episode_id] = (stored, arrays)
        assert writer.has_episode(meta.episode_id)
    ds = open_dataset(uri, config=config)
    assert ds.episode_ids == ["ep0", "ep1"] and len(ds) == 2
    for episode_id, (stored, arrays) in metas.items():
        assert ds.meta(episode_id) == stored
        ep = ds.open(episode_id)
        assert sorted(ep.arrays) == sorted(arrays)
        for name, array in arrays.items():
            got = ep.read(name)
            assert got.dtype == array.dtype and np.array_equal(got, array), name
        np.testing.assert_array_equal(ep["rgb"][1:3], arrays["rgb"][1:3])
        assert ds.size_bytes(episode_id) > 0
    assert "depth" not in ds.open("ep1")
    with pytest.raises(NotFound):
        ds.open("ep1")["depth"]
    return ds


def test_local_round_trip_plain_path_and_file_uri(tmp_path):
    check_round_trip(str(tmp_path / "plain"))
    ds = check_round_trip((tmp_path / "uri").as_uri())
    root = tmp_path / "uri"
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["format"] == "k4d.episodes" and info["schema_version"] == SCHEMA_VERSION
    assert info["layout"] == 2 and info["arrays"]["rgb"] == {"dims": ["T", "H", "W", 3], "dtype": "uint8"}
    assert sorted(p.stem for p in (root / "meta" / "episodes").iterdir()) == ds.episode_ids
    entry = json.loads((root / "meta" / "episodes" / "ep0.json").read_text())
    assert EpisodeMeta.from_dict(entry) == ds.meta("ep0")
    assert (root / "episodes" / "ep0" / "rgb" / "zarr.json").is_file()
    assert not (root / "manifest.json").exists()
    assert ds.counts() == {"episodes": 2, "frames": 2 * T} and ds.info.fps is None


@pytest.mark.integration
def test_s3_round_trip_streams_from_the_object_store(s3_server):
    config = load_config(env={}, s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                         s3_secret_key=s3_server.secret_key, s3_region=s3_server.region)
    uri = "s3://k4d-episodes-test/datasets/one"
    check_round_trip(uri, config)
    # A second writer appends; a plain reader sees both writers' episodes.
    meta, arrays = make_episode("ep2", seed=2)
    DatasetWriter(uri, config=config).write_episode(meta, arrays)
    assert open_dataset(uri, config=config).episode_ids == ["ep0", "ep1", "ep2"]
    with pytest.raises(NotFound):
        open_dataset("s3://k4d-episodes-test/datasets/none", config=config)


@pytest.mark.integration
def test_s3_concurrent_writers_and_layout1_migration(s3_server):
    """On S3 (no append, no rename): concurrent writers each PUT their own entries; a
    layout-1 dataset is read as is, then migrated by its first writer."""
    config = load_config(env={}, s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                         s3_secret_key=s3_server.secret_key, s3_region=s3_server.region)
    uri = "s3://k4d-episodes-test/datasets/many"
    writers = [DatasetWriter(uri, config=config) for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda i: writers[i % 3].write_episode(*make_episode(f"ep{i}", i)), range(6)))
    ds = open_dataset(uri, config=config)
    assert ds.episode_ids == [f"ep{i}" for i in range(6)]
    assert ds.counts() == {"episodes": 6, "frames": 6 * T}  # one concurrent batch of GETs
    writers[0].compact()  # S3 ETags as versions: the snapshot serves them all
    snap = open_dataset(uri, config=config)
    writers[1].write_episode(*make_episode("ep0", 9), overwrite=True)
    assert open_dataset(uri, config=config).meta("ep0").source["seed"] == 9  # new ETag
    assert [m.source["seed"] for m in snap.metas()] == [0, 1, 2, 3, 4, 5]
    writers[1].write_episode(*make_episode("ep0", 0), overwrite=True)
    ds = open_dataset(uri, config=config)

    loc = writers[0].location  # the same dataset rewritten into layout 1 by hand
    metas = [m.to_dict() for m in ds.metas()]
    loc.remove_tree("meta")
    loc.write_atomic("manifest.json", json.dumps(
        {"format": "k4d.episodes", "schema_version": SCHEMA_VERSION, "episodes": metas[:4]}).encode())
    loc.write_atomic("manifest.d/shard-00001.json", json.dumps(
        {"format": "k4d.episodes", "schema_version": SCHEMA_VERSION, "episodes": metas[4:]}).encode())
    assert open_dataset(uri, config=config).episode_ids == ds.episode_ids
    DatasetWriter(uri, config=config).write_episode(*make_episode("ep6", 6))
    assert loc.read_bytes("manifest.json") is None and loc.list_names("manifest.d") == []
    migrated = open_dataset(uri, config=config)
    assert migrated.episode_ids == [f"ep{i}" for i in range(7)]
    assert [m.to_dict() for m in migrated.metas()][:6] == metas
    np.testing.assert_array_equal(migrated.open("ep5").read("joints"), make_episode("ep5", 5)[1]["joints"])


def test_s3_without_credentials_is_one_clear_error(s3_server, monkeypatch, tmp_path):
    """No K4D_S3_ACCESS_KEY/SECRET and none in the AWS chain: FailedPrecondition naming the
    settings (CLI: one line, exit 2), not botocore's NoCredentialsError traceback."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    config = load_config(env={}, s3_endpoint=s3_server.endpoint, s3_region=s3_server.region)
    with pytest.raises(FailedPrecondition, match="K4D_S3_ACCESS_KEY") as info:
        open_dataset("s3://k4d-episodes-test/datasets/one", config=config)
    assert info.value.cli_exit_code == 2 and "\n" not in str(info.value)
    meta, arrays = make_episode("ep0", seed=0)
    with pytest.raises(FailedPrecondition, match="K4D_S3_ACCESS_KEY"):
        DatasetWriter("s3://k4d-episodes-test/datasets/nocreds", config=config).write_episode(meta, arrays)


def test_crash_between_group_and_index_entry_leaves_the_episode_unlisted(tmp_path, monkeypatch):
    uri = tmp_path / "ds"
    meta, arrays = make_episode("ep0")
    writer = DatasetWriter(uri)

    def crash(self, metas):
        raise KeyboardInterrupt("killed before the index entry")

    monkeypatch.setattr(dataset_mod.DatasetWriter, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        writer.write_episode(meta, arrays)
    monkeypatch.undo()
    assert (uri / "episodes" / "ep0" / "zarr.json").is_file()  # the group is there ...
    ds = open_dataset(uri)
    assert ds.episode_ids == [] and "ep0" not in ds  # ... and not listed
    with pytest.raises(NotFound, match="not a complete episode"):
        ds.open("ep0")
    resumed = DatasetWriter(uri)
    assert not resumed.has_episode("ep0")
    resumed.write_episode(meta, arrays)
    assert open_dataset(uri).episode_ids == ["ep0"]


def test_write_without_commit_then_commit(tmp_path):
    writer = DatasetWriter(tmp_path / "ds")
    stored = [writer.write_episode(*make_episode(f"ep{i}", i), commit=False) for i in range(2)]
    assert open_dataset(tmp_path / "ds").episode_ids == []
    writer.commit(stored)
    assert open_dataset(tmp_path / "ds").episode_ids == ["ep0", "ep1"]


def test_concurrent_writers_append_without_sharing_an_object(tmp_path):
    """Several processes' writers (datagen workers, Indexed-Job pods) append to one dataset
    at once: each commit writes only its own episodes' entries, so nothing is lost."""
    uri = tmp_path / "ds"
    writers = [DatasetWriter(uri) for _ in range(4)]  # all open before anyone commits
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: writers[i % 4].write_episode(*make_episode(f"ep{i:02d}", i)), range(12)))
    assert open_dataset(uri).episode_ids == [f"ep{i:02d}" for i in range(12)]
    # Another writer's episode is complete for everyone, and may be replaced by anyone.
    assert writers[1].has_episode("ep00") and DatasetWriter(uri).has_episode("ep00")
    with pytest.raises(FailedPrecondition, match="already complete"):
        writers[1].write_episode(*make_episode("ep00"))
    writers[1].write_episode(*make_episode("ep00", 7), overwrite=True)
    assert open_dataset(uri).meta("ep00").source["seed"] == 7


def test_writers_creating_one_dataset_at_once_all_succeed(tmp_path):
    """Indexed-Job pods start together on a new dataset: a writer that finds another's
    half-created meta/ waits for its info.json instead of calling it "not a dataset"."""
    uri = tmp_path / "ds"
    (uri / "meta").mkdir(parents=True)  # a creator between its mkdir and its info.json
    timer = threading.Timer(0.2, lambda: DatasetWriter(tmp_path / "elsewhere") and shutil.copy(
        tmp_path / "elsewhere" / "meta" / "info.json", uri / "meta" / "info.json"))
    timer.start()
    try:
        writer = DatasetWriter(uri)
    finally:
        timer.join()
    writer.write_episode(*make_episode("ep0"))
    assert open_dataset(uri).episode_ids == ["ep0"]
    with ThreadPoolExecutor(4) as pool:  # and from scratch, truly at once
        list(pool.map(lambda i: DatasetWriter(tmp_path / "new").write_episode(*make_episode(f"ep{i}", i)),
                      range(4)))
    assert open_dataset(tmp_path / "new").episode_ids == ["ep0", "ep1", "ep2", "ep3"]
    (tmp_path / "stale" / "meta").mkdir(parents=True)  # never completed: refused, after a wait
    with pytest.raises(InvalidArgument, match="not a k4d dataset"):
        DatasetWriter(tmp_path / "stale")


def test_snapshot_serves_reads_in_one_request_and_never_a_stale_meta(tmp_path, monkeypatch):
    uri = tmp_path / "ds"
    writer = DatasetWriter(uri)
    for i in range(4):
        writer.write_episode(*make_episode(f"ep{i}", i))
    assert writer.compact() == 4
    reads = []
    original = LocalLocation.read_many

    def counting(self, rels):
        reads.extend(rels)
        return original(self, rels)

    monkeypatch.setattr(LocalLocation, "read_many", counting)
    assert open_dataset(uri).counts() == {"episodes": 4, "frames": 4 * T} and reads == []
    # Commits, an overwrite and an unlisting after the snapshot: those entries are read.
    writer.write_episode(*make_episode("ep4", 4))
    writer.write_episode(*make_episode("ep1", 9), overwrite=True)
    (uri / "meta" / "episodes" / "ep2.json").unlink()
    ds = open_dataset(uri)
    assert ds.episode_ids == ["ep0", "ep1", "ep3", "ep4"]
    assert ds.meta("ep1").source["seed"] == 9 and sorted(reads) == ["meta/episodes/ep1.json",
                                                                    "meta/episodes/ep4.json"]
    # A damaged snapshot is only a missed cache.
    (uri / "meta" / "episodes.snapshot.json").write_text("{not json")
    reads.clear()
    assert [m.episode_id for m in open_dataset(uri).metas()] == ["ep0", "ep1", "ep3", "ep4"]
    assert len(reads) == 4


def test_committing_one_episode_writes_the_same_bytes_at_any_size(tmp_path, monkeypatch):
    """Item 7 of issue 19: a commit must not rewrite every EpisodeMeta."""
    writer = DatasetWriter(tmp_path / "ds")
    meta, _ = make_episode("x")
    written = []
    original = type(writer.location).write_atomic

    def counting(self, rel, data):
        written.append((rel, len(data)))
        return original(self, rel, data)

    monkeypatch.setattr(type(writer.location), "write_atomic", counting)
    per_commit = {}
    for n in (1, 200):
        while len(open_dataset(tmp_path / "ds")) < n - 1:  # commit(): groups are trusted
            writer.commit([dataclasses.replace(meta, episode_id=f"fill{len(written):05d}")])
        written.clear()
        writer.commit([dataclasses.replace(meta, episode_id=f"probe{n:05d}")])
        per_commit[n] = list(written)
    assert [rel for rel, _ in per_commit[200]] == ["meta/episodes/probe00200.json"]
    assert per_commit[200][0][1] == per_commit[1][0][1]


def _to_layout1(root, shard_ids=()):
    """Rewrite a dataset into layout 1, byte for byte as the earlier writer left it:
    manifest.json (+ manifest.d/<shard>.json) listing full EpisodeMetas, no meta/."""
    metas = {p.stem: json.loads(p.read_text()) for p in (root / "meta" / "episodes").glob("*.json")}
    shutil.rmtree(root / "meta")

    def doc(ids):
        return json.dumps({"format": "k4d.episodes", "schema_version": SCHEMA_VERSION,
                           "episodes": [metas[k] for k in sorted(ids)]}, indent=1, sort_keys=True) + "\n"

    (root / "manifest.json").write_text(doc(set(metas) - set(shard_ids)))
    if shard_ids:
        (root / "manifest.d").mkdir()
        (root / "manifest.d" / "shard-00001.json").write_text(doc(shard_ids))
    return metas


def test_layout1_datasets_are_read_and_migrated_by_the_first_writer(tmp_path):
    root = tmp_path / "old"
    writer = DatasetWriter(root)
    stored = {i: writer.write_episode(*make_episode(f"ep{i}", i)) for i in range(3)}
    _to_layout1(root, shard_ids=["ep2"])
    ds = open_dataset(root)  # read as is: a reader never writes
    assert ds.episode_ids == ["ep0", "ep1", "ep2"] and ds.meta("ep2") == stored[2]
    assert ds.info.fps == 10.0 and ds.counts() == {"episodes": 3, "frames": 3 * T}
    np.testing.assert_array_equal(ds.open("ep1").read("joints"), make_episode("ep1", 1)[1]["joints"])
    assert (root / "manifest.json").is_file() and not (root / "meta").exists()

    appender = DatasetWriter(root)  # migrates: entries, then info.json, then the manifests go
    assert not (root / "manifest.json").exists() and not (root / "manifest.d").exists()
    assert json.loads((root / "meta" / "info.json").read_text())["fps"] == 10.0
    assert appender.has_episode("ep2") and not appender.has_episode("ep3")
    appender.write_episode(*make_episode("ep3", 3))
    migrated = open_dataset(root)
    assert migrated.episode_ids == ["ep0", "ep1", "ep2", "ep3"]
    assert [migrated.meta(f"ep{i}") for i in range(3)] == [stored[i] for i in range(3)]


def test_migration_interrupted_before_info_reads_the_same_and_completes(tmp_path, monkeypatch):
    root = tmp_path / "old"
    writer = DatasetWriter(root)
    for i in range(2):
        writer.write_episode(*make_episode(f"ep{i}", i))
    _to_layout1(root)
    original = LocalLocation.write_atomic

    def crash_on_info(self, rel, data):
        if rel == dataset_mod.INFO:
            raise KeyboardInterrupt("killed mid-migration")
        return original(self, rel, data)

    monkeypatch.setattr(LocalLocation, "write_atomic", crash_on_info)
    with pytest.raises(KeyboardInterrupt):
        DatasetWriter(root)
    monkeypatch.undo()
    assert open_dataset(root).episode_ids == ["ep0", "ep1"]  # still layout 1, same episodes
    DatasetWriter(root)
    assert (root / "meta" / "info.json").is_file() and open_dataset(root).episode_ids == ["ep0", "ep1"]


def test_fps_fixed_at_creation_is_enforced(tmp_path):
    writer = DatasetWriter(tmp_path / "ds", fps=10)
    meta, arrays = make_episode("ep0")
    writer.write_episode(meta, arrays)
    meta.fps = 15.0
    with pytest.raises(InvalidArgument, match="10.0 fps dataset") as info:
        writer.write_episode(dataclasses.replace(meta, episode_id="ep1"), arrays)
    assert info.value.violations[0].field == "meta.fps"
    with pytest.raises(FailedPrecondition, match="has fps 10.0"):
        DatasetWriter(tmp_path / "ds", fps=15)
    assert open_dataset(tmp_path / "ds").info.fps == 10.0


def test_same_input_same_bytes(tmp_path):
    for name in ("a", "b"):
        DatasetWriter(tmp_path / name).write_episode(*make_episode("ep0", 3))
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_misuse_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("not a dataset")
    with pytest.raises(InvalidArgument, match="not a k4d dataset"):
        DatasetWriter(other)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InvalidArgument, match="not a directory"):
        DatasetWriter(tmp_path / "afile")
    with pytest.raises(NotFound):
        open_dataset(other)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(InvalidArgument, match="not a k4d episode manifest"):
        open_dataset(tmp_path / "bad")
    (tmp_path / "bad2" / "meta").mkdir(parents=True)
    (tmp_path / "bad2" / "meta" / "info.json").write_text('{"format": "k4d.episodes", "layout": 9}')
    with pytest.raises(InvalidArgument, match="this reader knows layout 2"):
        open_dataset(tmp_path / "bad2")
    with pytest.raises(InvalidArgument, match="expected a path"):
        DatasetWriter("http://example.com/ds")

    writer = DatasetWriter(tmp_path / "ds")
    meta, arrays = make_episode("ep0")
    writer.write_episode(meta, arrays)
    with pytest.raises(FailedPrecondition, match="already complete"):
        writer.write_episode(meta, arrays)
    writer.write_episode(meta, arrays, overwrite=True)

    def bad(**changes):
        m, a = make_episode("ep1")
        for key, value in changes.items():
            if key.startswith("meta_"):
                setattr(m, key[5:], value)
            elif value is None:
                del a[key]
            else:
                a[key] = value
        with pytest.raises(InvalidArgument) as info:
            writer.write_episode(m, a)
        return str(info.value)

    assert "missing required" in bad(rgb=None)
    assert "expected shape" in bad(rgb=np.zeros((T, H, W + 1, 3), np.uint8))
    assert "expected dtype" in bad(robot_mask=np.zeros((T, H, W), np.uint8))
    assert "expected shape" in bad(joints=np.zeros((T, J + 1)))
    assert "unknown arrays" in bad(flow=np.zeros((T, H, W, 2), np.float32))
    assert "finite" in bad(depth=np.full((T, H, W), np.nan, np.float32))
    assert "episode ids" in bad(meta_episode_id="../escape")
    assert "meta.frames" in bad(meta_frames=0)
    assert "meta.success" in bad(meta_success="yes")
    assert "meta.camera" in bad(meta_camera=[{}, {}])
    assert "meta.fps" in bad(meta_fps=float("nan"))
    assert open_dataset(tmp_path / "ds").episode_ids == ["ep0"]


def test_meta_round_trips_and_rejects_unknown_fields():
    meta, _ = make_episode("ep0")
    assert EpisodeMeta.from_dict(json.loads(json.dumps(meta.to_dict()))) == meta
    with pytest.raises(InvalidArgument, match="unknown fields"):
        EpisodeMeta.from_dict({**meta.to_dict(), "colour": "red"})
    with pytest.raises(InvalidArgument, match="schema"):
        EpisodeMeta.from_dict({**meta.to_dict(), "schema_version": 99})
    assert meta.camera_at(3) is meta.camera
