import numpy as np
import pytest
from k4d import pointmap_codec
from k4d.camera import look_at_transform
from k4d.errors import InvalidArgument
from k4d.video import read_video
from k4d_projection import codecs


def synthetic(T=4, H=24, W=32, seed=0):
    rng = np.random.default_rng(seed)
    pm = rng.normal([0.1, -0.2, 1.5], [0.3, 0.2, 0.25], size=(T, H, W, 3)).astype(np.float32)
    mask = rng.random((T, H, W)) < 0.4
    mask[2] = False  # a frame without the robot
    pm[~mask] = 0
    return pm, mask


def inside_clip(pm, mask, percentiles=(2, 98)):
    inside = np.zeros_like(mask)
    for t in range(pm.shape[0]):
        if mask[t].any():
            lo, hi = np.percentile(pm[t][mask[t]].astype(np.float64), percentiles, axis=0)
            inside[t] = mask[t] & np.all((pm[t] >= lo) & (pm[t] <= hi), axis=-1)
    return inside


def test_8bit_round_trip_error_is_bounded_by_the_quantisation_step():
    pm, mask = synthetic()
    enc = pointmap_codec.encode_8bit(pm, mask)
    assert enc.values.dtype == np.uint8 and enc.values.shape == pm.shape
    assert np.all(enc.values[~mask] == 0)
    dec = pointmap_codec.decode(enc)
    inside = inside_clip(pm, mask)
    step = pointmap_codec.quantisation_step(enc)
    err = np.abs(dec - pm).max(axis=-1)
    for t in range(pm.shape[0]):
        if inside[t].any():
            assert err[t][inside[t]].max() <= step[t] * (1 + 1e-5)
            # The bound is tight: errors reach more than half of it.
            assert err[t][inside[t]].max() > 0.5 * step[t]
    assert np.all(dec[~mask] == 0)
    # Normalised values use the whole [-1, 1] range along the largest axis.
    assert enc.values[0][mask[0]].max() == 255 or enc.values[0][mask[0]].min() == 0


def test_8bit_clips_outliers_to_the_percentile_box():
    pm, mask = synthetic()
    pm[0, 0, 0] = (50.0, 0.0, 1.5)
    mask[0, 0, 0] = True
    dec = pointmap_codec.decode(pointmap_codec.encode_8bit(pm, mask))
    assert dec[0, 0, 0, 0] < 2.0  # clipped, not preserved


def test_moving_camera_goes_through_first_frame_coordinates():
    pm, mask = synthetic(T=3)
    poses = np.stack([np.linalg.inv(look_at_transform([1.0 + 0.2 * t, 0.3, 1.0], [0, 0, 0.3]))
                      for t in range(3)])
    enc = pointmap_codec.encode_8bit(pm, mask, T_world_from_cam=poses)
    assert not np.allclose(enc.T_cam0_from_cam[1], np.eye(4))
    np.testing.assert_allclose(enc.T_cam0_from_cam[0], np.eye(4), atol=1e-12)
    dec = pointmap_codec.decode(enc)
    inside = inside_clip_cam0(pm, mask, enc.T_cam0_from_cam)
    step = pointmap_codec.quantisation_step(enc)
    for t in (0, 1):  # per-axis bound holds in cam0 axes; rotated back, its norm bounds it
        err = np.linalg.norm(dec[t] - pm[t], axis=-1)[inside[t]]
        assert err.max() <= np.sqrt(3) * step[t] * 1.01


def inside_clip_cam0(pm, mask, T_cam0_from_cam):
    p0 = np.einsum("tij,thwj->thwi", T_cam0_from_cam[:, :3, :3], pm.astype(np.float64)) \
        + T_cam0_from_cam[:, None, None, :3, 3]
    return inside_clip(p0, mask)


def test_lossless_forms():
    pm, mask = synthetic()
    exact = pointmap_codec.decode(pointmap_codec.encode_lossless(pm, mask, dtype="float32"))
    np.testing.assert_array_equal(exact, pm)
    enc16 = pointmap_codec.encode_lossless(pm, mask, dtype="float16")
    assert enc16.values.dtype == np.float16
    err = np.abs(pointmap_codec.decode(enc16) - pm).max(axis=-1)
    for t in (0, 1, 3):  # float16 error relative to the frame's scale
        q_max = np.nanmax(np.abs(enc16.values[t].astype(np.float64)))
        assert err[t].max() <= 2.0 ** -11 * enc16.scale[t] * max(q_max, 1.0) * 1.01 + 1e-6
    with pytest.raises(InvalidArgument):
        pointmap_codec.encode_lossless(pm, mask, dtype="int8")


def test_mask_recovered_from_values_and_first_camera_frame():
    pm, mask = synthetic()
    mask[0, 0, 0] = True
    pm[0, 0, 0] = (0.1, -0.2, 1.5)
    for enc in (pointmap_codec.encode_8bit(pm, mask), pointmap_codec.encode_lossless(pm, mask),
                pointmap_codec.encode_lossless(pm, mask, dtype="float16")):
        recovered = pointmap_codec.mask_from_values(enc.values)
        # 8-bit: a robot point may quantise to (0, 0, 0) only at the clip-box corner.
        assert (recovered != mask).mean() < 1e-3
        np.testing.assert_array_equal(pointmap_codec.decode(enc, frame="first_camera"),
                                      pointmap_codec.decode(enc))  # static camera
    with pytest.raises(InvalidArgument, match="clip_percentiles"):
        pointmap_codec.encode_8bit(pm, mask, percentiles=(98, 2))


def test_safetensors_round_trip(tmp_path):
    pm, mask = synthetic()
    for enc in (pointmap_codec.encode_8bit(pm, mask), pointmap_codec.encode_lossless(pm, mask, dtype="float16")):
        codecs.save(enc, tmp_path / "pm.safetensors")
        back = codecs.load(tmp_path / "pm.safetensors")
        np.testing.assert_array_equal(back.values, enc.values)
        np.testing.assert_array_equal(back.mask, enc.mask)
        np.testing.assert_array_equal(back.centre, enc.centre)
        np.testing.assert_array_equal(back.scale, enc.scale)
        np.testing.assert_array_equal(pointmap_codec.decode(back), pointmap_codec.decode(enc))
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(InvalidArgument, match="not a k4d pointmap"):
        codecs.load(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(InvalidArgument):
        codecs.load(tmp_path / "junk.safetensors")


def test_mp4_libx264rgb_crf0_is_lossless_and_yuv420_is_not(tmp_path):
    pm, mask = synthetic(T=3, H=32, W=48)
    frames = pointmap_codec.encode_8bit(pm, mask).values
    codecs.write_video(tmp_path / "pm.mp4", frames)
    np.testing.assert_array_equal(read_video(tmp_path / "pm.mp4"), frames)
    codecs.write_video(tmp_path / "lossy.mp4", frames, lossless=False)
    assert not np.array_equal(read_video(tmp_path / "lossy.mp4"), frames)


def test_bad_inputs():
    pm, mask = synthetic()
    with pytest.raises(InvalidArgument, match="mask"):
        pointmap_codec.encode_8bit(pm, mask[:, :-1])
    with pytest.raises(InvalidArgument, match="pointmap"):
        pointmap_codec.encode_8bit(pm[..., :2], mask)
    bad = pm.copy()
    bad[mask] = np.nan
    with pytest.raises(InvalidArgument, match="finite"):
        pointmap_codec.encode_8bit(bad, mask)
    with pytest.raises(InvalidArgument, match="camera_poses"):
        pointmap_codec.encode_8bit(pm, mask, T_world_from_cam=np.eye(4))
    with pytest.raises(InvalidArgument, match="frames"):
        codecs.write_video("x.mp4", pm)
