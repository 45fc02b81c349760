"""k4d.episodes: the shared episode format on a local directory and on a real S3 server."""

from __future__ import annotations

import json

import numpy as np
import pytest
from k4d.config import load_config
from k4d.episodes import SCHEMA_VERSION, DatasetWriter, EpisodeMeta, open_dataset
from k4d.episodes import dataset as dataset_mod
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
    manifest = json.loads((tmp_path / "uri" / "manifest.json").read_text())
    assert manifest["format"] == "k4d.episodes" and manifest["schema_version"] == SCHEMA_VERSION
    assert [m["episode_id"] for m in manifest["episodes"]] == ds.episode_ids
    assert (tmp_path / "uri" / "episodes" / "ep0" / "rgb" / "zarr.json").is_file()


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


def test_crash_between_group_and_manifest_leaves_the_episode_unlisted(tmp_path, monkeypatch):
    uri = tmp_path / "ds"
    meta, arrays = make_episode("ep0")
    writer = DatasetWriter(uri)

    def crash(self):
        raise KeyboardInterrupt("killed before the manifest")

    monkeypatch.setattr(dataset_mod.DatasetWriter, "_write_manifest", crash)
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


def test_shards_write_their_own_manifests(tmp_path):
    uri = tmp_path / "ds"
    for shard in ("0", "1"):
        meta, arrays = make_episode(f"ep{shard}", int(shard))
        DatasetWriter(uri, shard=shard).write_episode(meta, arrays)
    assert sorted(p.name for p in (uri / "manifest.d").iterdir()) == ["0.json", "1.json"]
    assert open_dataset(uri).episode_ids == ["ep0", "ep1"]
    assert DatasetWriter(uri, shard="1").has_episode("ep0")
    with pytest.raises(FailedPrecondition, match="another shard"):
        DatasetWriter(uri, shard="1").write_episode(*make_episode("ep0"), overwrite=True)


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
