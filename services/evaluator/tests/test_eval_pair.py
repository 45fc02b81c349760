"""`k4d eval pair`: outputs, a perfect report for equal inputs, regions (moving object),
and bad input as one line with exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from k4d.cli.main import main
from k4d_eval.clip import Clip
from k4d_eval.evaluate import Settings, evaluate_clips, summarise
from k4d_eval.regions import build_regions, moved_objects

T, H, W = 3, 24, 32


def _scene(rng):
    v, u = np.mgrid[0:H, 0:W]
    z = np.broadcast_to(1.5 + 0.1 * np.sin(u / 5.0), (T, H, W))
    pm = np.stack([(u - 16) / 30 * z, (v - 12) / 30 * z, z], -1).astype(np.float32)
    rgb = rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8)
    robot = np.zeros((T, H, W), bool)
    robot[:, 2:8, 2:12] = True
    return rgb, pm, robot


@pytest.fixture
def pair(tmp_path, rng):
    rgb, pm, robot = _scene(rng)
    np.savez(tmp_path / "gt.npz", rgb=rgb, pointmap=pm, mask=np.ones((T, H, W), bool),
             robot_mask=robot)
    noisy = np.clip(rgb.astype(int) + rng.integers(-9, 10, rgb.shape), 0, 255).astype(np.uint8)
    np.savez(tmp_path / "pred.npz", rgb=noisy, mask=np.ones((T, H, W), bool),
             pointmap=pm + rng.normal(0, 0.004, pm.shape).astype(np.float32))
    return tmp_path


def test_pair_outputs_and_perfect_self_report(pair, capsys):
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"),
                 "--out", str(pair / "o")]) == 0
    report = json.loads((pair / "o" / "report.json").read_text())
    for key in ("psnr", "ssim", "chamfer_l1", "chamfer_l2", "fscore"):
        assert report["metrics"][key] is not None
    assert "lpips" not in report["metrics"]  # no --weights
    assert set(report["regions"]) == {"whole", "robot", "environment", "changed", "static"}
    assert len(report["per_frame"]["ssim"]) == T
    assert report["settings"]["tau"] == 0.01
    csv = (pair / "o" / "summary.csv").read_text().splitlines()
    assert csv[0].startswith("method,psnr,ssim") and len(csv) == 4
    assert "| method | PSNR | SSIM |" in (pair / "o" / "summary.md").read_text()
    for png in ("per_frame.png", "strip.png"):
        assert (pair / "o" / png).read_bytes()[:4] == b"\x89PNG"

    assert main(["eval", "pair", str(pair / "gt.npz"), str(pair / "gt.npz"),
                 "--out", str(pair / "same")]) == 0
    same = json.loads((pair / "same" / "report.json").read_text())
    for region in same["regions"].values():
        assert region["psnr"] == 100.0 and region["ssim"] == pytest.approx(1.0)
        assert region["chamfer_l1"] == 0.0 and region["chamfer_l2"] == 0.0
        assert region["fscore"] == 1.0 and region["fscore_k4d"] == 1.0
        assert region["depth_absrel"] == 0.0 and region["depth_delta1"] == 1.0
    capsys.readouterr()


def _bad(tmp_path, name, **arrays):
    np.savez(tmp_path / name, **arrays)
    return str(tmp_path / name)


def test_bad_input_is_one_line_and_exit_2(pair, tmp_path, capsys, rng):
    gt = str(pair / "gt.npz")
    rgb, pm, robot = _scene(rng)
    nan = pm.copy()
    nan[1, 3, 3] = np.nan
    cases = [
        ("frames", _bad(tmp_path, "f.npz", rgb=rgb[:2], pointmap=pm[:2])),
        ("prediction is 20x32", _bad(tmp_path, "s.npz", rgb=rgb[:, :20], pointmap=pm[:, :20])),
        ("NaN", _bad(tmp_path, "n.npz", rgb=rgb, pointmap=nan, mask=np.ones((T, H, W), bool))),
        ("empty mask", _bad(tmp_path, "e.npz", rgb=rgb, pointmap=pm, mask=np.zeros((T, H, W), bool))),
        ("rgb", _bad(tmp_path, "r.npz", pointmap=pm)),
        ("no such", str(tmp_path / "absent.npz")),
    ]
    for needle, pred in cases:
        code = main(["eval", "pair", pred, gt, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("k4d eval: error:"), (needle, err)
        assert needle.lower() in err[0].lower(), (needle, err)
    code = main(["eval", "pair", gt, gt, "--out", str(tmp_path / "o"), "--tau", "-1"])
    assert code == 2 and "tau" in capsys.readouterr().err


def test_moving_object_region_from_object_ids_and_poses(rng):
    rgb, pm, robot = _scene(rng)
    ids = np.full((T, H, W), -1, np.int16)
    ids[:, 15:20, 5:10] = 1            # object 1 stays
    ids[0, 15:20, 20:25] = 2           # object 2 moves right
    ids[1:, 15:20, 24:29] = 2
    poses = np.zeros((T, 2, 7))
    poses[..., 6] = 1
    poses[1:, 1, 1] = 0.05
    assert moved_objects(poses) == [2]
    gt = Clip(rgb=rgb, pointmap=pm, valid=np.ones((T, H, W), bool), robot_mask=robot,
              object_ids=ids, object_poses=poses)
    region = build_regions(gt, synthetic=True)["moving_object"]
    assert region[1, 17, 21] and region[1, 17, 27] and not region[1, 17, 7]
    assert region[1].sum() == 5 * 9
    # Without ids: where ground truth differs from frame 0, outside the robot.
    changed = rgb.copy()
    changed[1:, 10:12, 20:30] = 255 - changed[0, 10:12, 20:30]
    plain = Clip(rgb=changed, robot_mask=robot)
    diff = build_regions(plain, synthetic=True)["moving_object"]
    assert not diff[0].any() and diff[1, 10:12, 20:30].mean() > 0.5 and not diff[:, 2:8, 2:12].any()


def test_objects_region_holds_every_shown_object_outside_the_robot(rng):
    rgb, pm, robot = _scene(rng)
    ids = np.full((T, H, W), -1, np.int16)
    ids[:, 15:20, 5:10] = 1            # object 1 stays
    ids[:, 5:8, 10:14] = 2             # object 2 half behind the robot (2:8, 2:12)
    gt = Clip(rgb=rgb, pointmap=pm, valid=np.ones((T, H, W), bool), depth=pm[..., 2].copy(),
              robot_mask=robot, object_ids=ids)
    region = build_regions(gt)["objects"]
    assert region.sum() == T * (5 * 5 + 3 * 2)
    assert region[2, 17, 7] and region[2, 6, 13] and not region[2, 6, 10]
    assert "objects" not in build_regions(Clip(rgb=rgb, robot_mask=robot))
    # An object pushed 6 cm back: 1 % of the frame, where its region sees all of it.
    bad = pm.copy()
    bad[:, 15:20, 5:10, 2] += 0.06
    pred = Clip(rgb=rgb.copy(), pointmap=bad, valid=gt.valid, depth=bad[..., 2].copy())
    result = evaluate_clips(pred, gt, Settings(geometry_pixels=0))
    whole, objects = summarise(result.stats["whole"]), summarise(result.stats["objects"])
    assert whole["depth_absrel"] < 0.2 * objects["depth_absrel"]
    z = pm[0, 15:20, 5:10, 2]
    assert objects["depth_absrel"] == pytest.approx(float((0.06 / z).sum()) / 31, rel=1e-4)


def test_region_metrics_isolate_a_damaged_object(rng):
    rgb, pm, robot = _scene(rng)
    gt = Clip(rgb=rgb, pointmap=pm, valid=np.ones((T, H, W), bool),
              depth=pm[..., 2].copy(), robot_mask=robot)
    bad = pm.copy()
    bad[:, 2:8, 2:12, 2] += 0.3  # the robot's points pushed 30 cm back
    pred = Clip(rgb=rgb.copy(), pointmap=bad, valid=gt.valid, depth=bad[..., 2].copy())
    result = evaluate_clips(pred, gt, Settings(geometry_pixels=0))
    env, rob = summarise(result.stats["environment"]), summarise(result.stats["robot"])
    assert env["chamfer_l1"] == 0.0 and env["depth_absrel"] == 0.0 and env["psnr"] == 100.0
    assert rob["depth_absrel"] > 0.15 and rob["fscore"] == 0.0


def test_depth_metrics_per_frame_match_the_functional_form(rng):
    from k4d_eval import geometry
    from k4d_eval.evaluate import metric_values

    rgb, pm, robot = _scene(rng)
    gt = Clip(rgb=rgb, pointmap=pm, valid=np.ones((T, H, W), bool), depth=pm[..., 2].copy(),
              robot_mask=robot)
    z = (pm[..., 2] * rng.uniform(0.7, 1.4, (T, H, W))).astype(np.float32)
    pred = Clip(rgb=rgb, pointmap=pm, valid=gt.valid, depth=z)
    values = metric_values(evaluate_clips(pred, gt, Settings(geometry_pixels=0)).stats["robot"])
    for t in range(T):
        want = geometry.depth_stats(z[t][robot[t]].astype(float), gt.depth[t][robot[t]].astype(float))
        assert values["depth_absrel"][t] == pytest.approx(want["absrel_sum"] / want["n"])
        assert values["depth_delta1"][t] == pytest.approx(want["delta1_count"] / want["n"])


def test_a_file_that_is_not_an_npz_is_one_line_naming_it(pair, tmp_path, capsys):
    """A directory, an image, a truncated NPZ, a lone .npy: one line naming the file and
    what was expected, exit code 2, on either side of the pair."""
    from PIL import Image

    gt = pair / "gt.npz"
    (tmp_path / "a_dir").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "frame.png")
    data = gt.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "tail_cut.npz").write_bytes(data[:-40])
    np.save(tmp_path / "one.npy", np.zeros(3))
    cases = {"a_dir": "is a directory", "frame.png": "is a PNG image",
             "cut.npz": "truncated or damaged", "tail_cut.npz": "truncated or damaged",
             "one.npy": "single .npy array"}
    for name, needle in cases.items():
        bad = str(tmp_path / name)
        for args in ([bad, str(gt)], [str(gt), bad]):
            code = main(["eval", "pair", *args, "--out", str(tmp_path / "o")])
            err = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and len(err) == 1, (name, err)
            assert bad in err[0] and needle in err[0] and "expected an NPZ file" in err[0], err
    assert not (tmp_path / "o" / "report.json").exists()


def test_report_records_the_geometry_sample_and_summary_says_how_to_compare(pair):
    out = pair / "sampled"
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"), "--out", str(out),
                 "--geometry-pixels", "100", "--seed", "3"]) == 0
    settings = json.loads((out / "report.json").read_text())["settings"]
    assert settings["geometry_pixels"] == 100 and settings["seed"] == 3
    assert settings["geometry_sampling"]["pixels_per_frame"] == 100
    assert settings["geometry_sampling"]["seed"] == 3
    assert "equal geometry_pixels" in settings["geometry_sampling"]["compare"]
    assert settings["learned_metrics"] is None  # no --weights
    text = (out / "summary.md").read_text()
    assert "100 sampled pixels per frame (seed 3)" in text and "same sampling" in text
    # A different seed samples other pixels: the F-score moves, which is why it is recorded.
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"),
                 "--out", str(pair / "sampled4"), "--geometry-pixels", "100", "--seed", "4"]) == 0
    a = json.loads((out / "report.json").read_text())["metrics"]["chamfer_l1"]
    b = json.loads((pair / "sampled4" / "report.json").read_text())["metrics"]["chamfer_l1"]
    assert a != b
