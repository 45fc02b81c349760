"""LPIPS, FID, FVD and latent L2 on small backbones the tests build, against their
formulas; weights verified by sha256; a missing file is one line naming it."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from k4d.cli.main import main  # noqa: E402
from k4d_eval import learned  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

LAYERS_2D = [{"op": "conv2d", "name": "c1", "in": 3, "out": 4, "kernel": 3, "padding": 1},
             {"op": "relu", "tap": True}, {"op": "maxpool", "kernel": 2, "stride": 2},
             {"op": "conv2d", "name": "c2", "in": 4, "out": 5, "kernel": 3, "padding": 1},
             {"op": "relu", "tap": True}]
LAYERS_3D = [{"op": "conv3d", "name": "c1", "in": 3, "out": 4, "kernel": 3, "padding": 1},
             {"op": "relu", "tap": True}]


def _write(path, layers, extra=None, input_spec=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    module = learned.build_backbone(layers)
    tensors = {}
    for i, name in enumerate(module.names):
        if name:
            conv = module.ops[i]
            tensors[f"{name}.weight"] = torch.randn(conv.weight.shape, generator=g) * 0.3
            tensors[f"{name}.bias"] = torch.randn(conv.bias.shape, generator=g) * 0.1
    tensors.update(extra or {})
    save_file(tensors, str(path), metadata={learned.LAYERS_KEY: json.dumps(layers),
                                            learned.INPUT_KEY: json.dumps(input_spec or {})})
    return tensors


@pytest.fixture
def weights(tmp_path):
    lins = {"lin0.weight": torch.rand(1, 4, 1, 1), "lin1.weight": torch.rand(1, 5, 1, 1)}
    _write(tmp_path / "lpips.safetensors", LAYERS_2D, lins, learned.LPIPS_INPUT)
    _write(tmp_path / "fid.safetensors", LAYERS_2D, seed=1)
    _write(tmp_path / "fvd.safetensors", LAYERS_3D, input_spec={"clip_frames": 2}, seed=2)
    sums = "".join(f"{hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()}  {n}\n"
                   for n in learned.WEIGHT_FILES.values())
    (tmp_path / learned.SUMS_FILE).write_text(sums)
    return tmp_path


def _lpips_reference(tensors, x_u8, y_u8):
    """LPIPS written out directly with torch.nn.functional (the formula, no Backbone)."""
    F = torch.nn.functional

    def prep(u8):
        x = torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 127.5 - 1
        shift = torch.tensor(learned.LPIPS_INPUT["shift"]).view(1, 3, 1, 1)
        return (x - shift) / torch.tensor(learned.LPIPS_INPUT["scale"]).view(1, 3, 1, 1)

    def feats(x):
        f1 = F.relu(F.conv2d(x, tensors["c1.weight"], tensors["c1.bias"], padding=1))
        f2 = F.relu(F.conv2d(F.max_pool2d(f1, 2, 2), tensors["c2.weight"], tensors["c2.bias"], padding=1))
        return [f1, f2]

    total = 0
    for i, (a, b) in enumerate(zip(feats(prep(x_u8)), feats(prep(y_u8)), strict=True)):
        na = a / (a.norm(dim=1, keepdim=True) + 1e-10)
        nb = b / (b.norm(dim=1, keepdim=True) + 1e-10)
        w = tensors[f"lin{i}.weight"].view(1, -1, 1, 1)
        total = total + ((na - nb) ** 2 * w).sum(1).mean(dim=(1, 2))
    return total.numpy()


def test_lpips_matches_the_formula_and_is_zero_for_equal_frames(weights, rng):
    from safetensors.torch import load_file

    net = learned.load_backbone(learned.verified_file(weights, "lpips.safetensors", "LPIPS"))
    x = rng.integers(0, 256, (3, 16, 20, 3), dtype=np.uint8)
    y = rng.integers(0, 256, (3, 16, 20, 3), dtype=np.uint8)
    got = learned.lpips_frames(net, x, y, batch=2)
    want = _lpips_reference(load_file(str(weights / "lpips.safetensors")), x, y)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert np.all(got > 0)
    np.testing.assert_allclose(learned.lpips_frames(net, x, x), 0.0, atol=1e-12)


def test_frechet_distance_known_values(rng):
    a = rng.normal(0, 1, (4000, 3))
    assert learned.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-8)
    # Independent axes: FD = |mu1 - mu2|^2 + sum (s1 - s2)^2 per axis (std devs s).
    b = rng.normal(0, 1, (4000, 3)) * [1, 2, 3] + [1, 0, 0]
    s1, s2 = np.sqrt(np.diag(np.cov(a, rowvar=False))), np.sqrt(np.diag(np.cov(b, rowvar=False)))
    mu = a.mean(0) - b.mean(0)
    want = mu @ mu + np.sum((s1 - s2) ** 2)
    assert learned.frechet_distance(a, b) == pytest.approx(want, rel=0.02)


def test_learned_metrics_on_clips(weights, rng, frames):
    from k4d_eval.clip import Clip

    metrics = learned.LearnedMetrics.from_args(str(weights), None)
    gts = [Clip(rgb=frames(rng, frames=4, height=16, width=24)) for _ in range(3)]
    same = metrics(gts, gts)
    assert same["lpips"] == pytest.approx(0, abs=1e-9)
    assert same["fid"] == pytest.approx(0, abs=1e-6) and same["fvd"] == pytest.approx(0, abs=1e-6)
    noisy = [Clip(rgb=np.clip(g.rgb + rng.integers(-60, 60, g.rgb.shape), 0, 255).astype(np.uint8))
             for g in gts]
    diff = metrics(noisy, gts)
    assert diff["lpips"] > 0.001 and diff["fid"] > 1e-6 and diff["fvd"] > 1e-6


def test_latent_l2_with_a_tiny_wan_vae(tmp_path, rng, frames):
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1], num_res_blocks=1,
                           temperal_downsample=[True], latents_mean=[0.1, -0.2, 0.0, 0.3],
                           latents_std=[1.5, 2.0, 1.0, 0.5])
    vae.save_pretrained(tmp_path / "model" / "vae")
    loaded = learned.load_vae(str(tmp_path / "model"))
    x = frames(rng, frames=5, height=16, width=16)
    y = np.clip(x.astype(int) + 40, 0, 255).astype(np.uint8)
    assert learned.latent_l2(loaded, x, x) == 0.0
    got = learned.latent_l2(loaded, x, y)

    def z(u8):
        t = torch.from_numpy(u8).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
        with torch.no_grad():
            m = vae.encode(t).latent_dist.mean
        return (m - torch.tensor([0.1, -0.2, 0.0, 0.3]).view(1, -1, 1, 1, 1)) / \
            torch.tensor([1.5, 2.0, 1.0, 0.5]).view(1, -1, 1, 1, 1)

    assert got == pytest.approx(float(((z(x) - z(y)) ** 2).mean()), rel=1e-5) and got > 0


def test_missing_or_tampered_weights_are_one_line(weights, tmp_path, capsys, rng):
    gt = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    np.savez(tmp_path / "gt.npz", rgb=gt)
    (weights / "fvd.safetensors").unlink()
    code = main(["eval", "pair", str(tmp_path / "gt.npz"), str(tmp_path / "gt.npz"),
                 "--out", str(tmp_path / "o"), "--weights", str(weights)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "fvd.safetensors" in err[0]
    with open(weights / "fid.safetensors", "ab") as f:
        f.write(b"x")
    with pytest.raises(learned.IntegrityError):
        learned.verified_file(weights, "fid.safetensors", "FID")


def test_dataset_report_carries_learned_metrics(weights, tmp_path, rng):
    pytest.importorskip("zarr")
    from k4d.episodes import DatasetWriter, EpisodeMeta

    T, H, W = 4, 16, 24
    cam = {"width": W, "height": H, "fx": 20.0, "fy": 20.0, "cx": 11.5, "cy": 7.5,
           "T_cam_from_world": np.eye(4).tolist()}
    writer = DatasetWriter(tmp_path / "data")
    for i in range(2):
        rgb = rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8)
        arrays = {"rgb": rgb, "robot_mask": np.zeros((T, H, W), bool),
                  "robot_rgb": np.zeros((T, H, W, 3), np.uint8),
                  "robot_pointmap": np.zeros((T, H, W, 3), np.float32), "joints": np.zeros((T, 1))}
        writer.write_episode(EpisodeMeta(
            episode_id=f"ep{i}", frames=T, height=H, width=W, fps=10.0, task="", task_kind="import",
            success=None, success_judge="", robot="panda", joint_names=["j"], actions={},
            camera=cam, arrays=sorted(arrays)), arrays)
        pred = tmp_path / "pred" / f"ep{i}"
        pred.mkdir(parents=True)
        pm = np.ones((T, H, W, 3), np.float32)
        np.savez(pred / "pointmap.npz", rgb=255 - rgb, pointmap=pm, mask=np.ones((T, H, W), bool))
    assert main(["eval", "--pred", str(tmp_path / "pred"), "--gt", str(tmp_path / "data"),
                 "--no-baseline", "--no-progress", "--out", str(tmp_path / "o"),
                 "--weights", str(weights)]) == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["metrics"]["lpips"] > 0 and report["metrics"]["fid"] > 0
    assert report["metrics"]["fvd"] >= 0 and report["metrics"]["chamfer_l1"] is None
    # Which weights made those numbers: file, sha256 and architecture, in the settings.
    sources = report["settings"]["learned_metrics"]
    assert set(sources) == {"lpips", "fid", "fvd"}
    for metric, name in learned.WEIGHT_FILES.items():
        want = hashlib.sha256((weights / name).read_bytes()).hexdigest()
        assert sources[metric] == {"weights": str(weights), "file": name, "sha256": want,
                                   "architecture": "layers"}, metric


def test_learned_metrics_report_the_registry_names(weights, rng, frames):
    """What LearnedMetrics returns is listed in k4d_eval.metric_registry, lower is better."""
    from k4d_eval import metric_registry
    from k4d_eval.clip import Clip

    gts = [Clip(rgb=frames(rng, frames=4, height=16, width=24)) for _ in range(3)]
    values = learned.LearnedMetrics.from_args(str(weights), None)(gts, gts)
    assert set(values) == {"lpips", "fid", "fvd"}
    for name in values:
        assert metric_registry.info(name).higher_is_better is False
