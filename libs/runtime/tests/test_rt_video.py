"""k4d.video (the one mp4 writer/reader) and k4d.pointmap_video (the one pointmap_k4d
writer and schema)."""

import json

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d.pointmap_codec import decode, encode_8bit, quantisation_step
from k4d.pointmap_video import (
    METADATA_KEYS,
    POINTMAP_VIDEO,
    POINTMAP_VIDEO_META,
    read_pointmap_video,
    write_pointmap_video,
)
from k4d.video import read_video, write_video


def frames(T=3, H=32, W=48, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (T, H, W, 3), dtype=np.uint8)


def synthetic(T=3, H=24, W=32, seed=1):
    rng = np.random.default_rng(seed)
    pm = np.zeros((T, H, W, 3))
    pm[..., :2] = rng.uniform(-0.5, 0.5, (T, H, W, 2))
    pm[..., 2] = rng.uniform(1.0, 3.0, (T, H, W))
    mask = rng.random((T, H, W)) > 0.3
    pm[~mask] = 0
    return pm, mask


def test_lossless_round_trip_is_exact_and_lossy_is_not(tmp_path):
    f = frames()
    path = write_video(tmp_path / "sub" / "a.mp4", f, fps=24)
    assert path.exists() and not list(path.parent.glob(".*tmp*"))
    np.testing.assert_array_equal(read_video(path), f)
    odd = frames(T=2, H=17, W=31, seed=3)  # odd sizes and an NTSC rate stay exact too
    np.testing.assert_array_equal(read_video(write_video(tmp_path / "odd.mp4", odd, fps=23.976)), odd)
    write_video(tmp_path / "b.mp4", f, fps=30, lossless=False)
    back = read_video(tmp_path / "b.mp4")
    assert back.shape == f.shape and not np.array_equal(back, f)


def test_lossy_pads_odd_sizes_and_keeps_smooth_content_close(tmp_path):
    grad = np.broadcast_to(np.linspace(0, 255, 31, dtype=np.uint8)[None, None, :, None],
                           (2, 17, 31, 3)).copy()
    back = read_video(write_video(tmp_path / "odd.mp4", grad, fps=10, lossless=False))
    assert back.shape == (2, 18, 32, 3)
    assert np.abs(back[:, :17, :31].astype(int) - grad).mean() < 3


def test_bad_input(tmp_path):
    with pytest.raises(InvalidArgument, match="frames"):
        write_video(tmp_path / "x.mp4", np.zeros((2, 8, 8, 3), np.float32))
    with pytest.raises(InvalidArgument, match="frames"):
        write_video(tmp_path / "x.mp4", np.zeros((0, 8, 8, 3), np.uint8))
    for fps in (0, -1, float("nan"), float("inf"), "x"):
        with pytest.raises(InvalidArgument, match="fps"):
            write_video(tmp_path / "x.mp4", frames(T=1), fps=fps)
    (tmp_path / "junk.mp4").write_bytes(b"\x00" * 64)
    with pytest.raises(InvalidArgument, match="path"):
        read_video(tmp_path / "junk.mp4")
    with pytest.raises(InvalidArgument, match="path"):
        read_video(tmp_path / "missing.mp4")
    assert not list(tmp_path.glob("*.mp4")) or {p.name for p in tmp_path.glob("*.mp4")} == {"junk.mp4"}


def test_pointmap_video_schema_and_metric_round_trip(tmp_path):
    pm, mask = synthetic()
    video, meta_path = write_pointmap_video(tmp_path, pm, mask, fps=12.5,
                                            mask_source="the `mask` of pointmap.npz")
    assert (video.name, meta_path.name) == (POINTMAP_VIDEO, POINTMAP_VIDEO_META)
    meta = json.loads(meta_path.read_text())
    assert tuple(meta) == METADATA_KEYS
    assert meta["format"] == "k4d.pointmap.u8" and meta["version"] == "1"
    assert meta["clip_percentiles"] == [2.0, 98.0] and meta["fps"] == 12.5
    assert np.asarray(meta["T_cam0_from_cam"]).shape == (3, 4, 4)
    assert "pointmap.npz" in meta["decode"]
    encoded = read_pointmap_video(tmp_path)
    reference = encode_8bit(pm, mask)
    np.testing.assert_array_equal(encoded.values, reference.values)
    np.testing.assert_array_equal(encoded.mask, mask)
    back = decode(encoded)
    # inside the clip box the error is at most one half step per axis (k4d.pointmap_codec)
    inside = np.zeros_like(mask)
    for t in range(len(pm)):
        lo, hi = np.percentile(pm[t][mask[t]], (2, 98), axis=0)
        inside[t] = mask[t] & np.all((pm[t] >= lo) & (pm[t] <= hi), axis=-1)
    err = np.abs(back - pm)[inside].max(axis=0)
    assert np.all(err <= quantisation_step(reference).max() + 1e-9)


def test_moving_camera_keeps_the_first_frame_transform(tmp_path):
    pm, mask = synthetic(T=2)
    poses = np.stack([np.eye(4), np.eye(4)])
    poses[1, :3, 3] = [0.2, 0.0, 0.1]
    write_pointmap_video(tmp_path, pm, mask, fps=24, T_world_from_cam=poses)
    meta = json.loads((tmp_path / POINTMAP_VIDEO_META).read_text())
    np.testing.assert_allclose(np.asarray(meta["T_cam0_from_cam"])[1, :3, 3], [0.2, 0.0, 0.1])
    np.testing.assert_array_equal(decode(read_pointmap_video(tmp_path)),
                                  decode(encode_8bit(pm, mask, T_world_from_cam=poses)))


def test_read_refuses_other_documents(tmp_path):
    with pytest.raises(InvalidArgument, match="cannot read"):
        read_pointmap_video(tmp_path)
    (tmp_path / POINTMAP_VIDEO_META).write_text(json.dumps({"format": "k4d.pointmap.u8"}))
    with pytest.raises(InvalidArgument, match="version 1"):
        read_pointmap_video(tmp_path)
