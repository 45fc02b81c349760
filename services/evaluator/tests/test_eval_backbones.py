"""The standard LPIPS / FID / FVD backbones (k4d_eval.backbones): a file with the published
key names (random values) loads through the public path with every tensor consumed, the
features equal the architecture's own forward, the metric formulas hold, and a file that
matches no architecture, a missing file or a wrong sha256 is one line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from k4d.cli.main import main  # noqa: E402
from k4d.testing.modules import load_path_module  # noqa: E402
from k4d_eval import backbones, learned  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

F = torch.nn.functional
# Tensors in the published files (parameters and batch-norm statistics, without
# num_batches_tracked), counted from the reference definitions:
# pytorch-fid's InceptionV3 = torchvision Inception3(num_classes=1008, aux_logits=False):
#   94 BasicConv2d x (conv.weight + 4 bn tensors) + fc.weight + fc.bias = 472;
# LPIPS alex = torchvision AlexNet features (5 convs x 2) + lin0..lin4 = 15;
# LPIPS vgg16 = 13 convs x 2 + 5 lins = 31;
# piergiaj InceptionI3d = 57 Unit3D x (conv3d.weight + 4 bn tensors) + logits w/b = 287.
PUBLISHED_TENSORS = {"inception-v3-fid": 472, "lpips-alex": 15, "lpips-vgg16": 31,
                     "i3d-kinetics400": 287}


def _random_state(arch: str, seed: int = 0) -> tuple[torch.nn.Module, dict]:
    """The architecture with random weights and batch-norm statistics, and its state dict
    under the official key names (as the converter writes them)."""
    torch.manual_seed(seed)
    module = backbones.ARCHITECTURES[arch][0]()
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if name.endswith("running_mean") or name.endswith("bn.bias"):
                t.copy_(torch.randn_like(t) * 0.1)
            elif name.endswith("running_var") or name.endswith("bn.weight"):
                t.copy_(torch.rand_like(t) + 0.5)
            elif name.startswith("lin"):
                t.copy_(torch.rand_like(t))
    module.eval()
    state = {k: v.clone() for k, v in module.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    return module, state


def _save(path: Path, state: dict, metadata=None) -> Path:
    save_file(state, str(path), metadata=metadata)
    return path


def _sums(directory: Path) -> None:
    (directory / learned.SUMS_FILE).write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
        for p in sorted(directory.glob("*.safetensors"))))


@pytest.mark.parametrize("arch", sorted(PUBLISHED_TENSORS))
def test_official_key_set_is_consumed_exactly(arch, tmp_path):
    module, state = _random_state(arch)
    assert set(state) == backbones.expected_keys(arch)
    assert len(state) == PUBLISHED_TENSORS[arch]
    assert backbones.detect(state) == arch
    net = learned.load_backbone(_save(tmp_path / "w.safetensors", state))
    assert net.arch == arch
    loaded = net.module.state_dict()
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key
    # a tensor missing, one too many, a wrong shape: one line naming the problem
    for bad in ({k: v for k, v in state.items() if k != sorted(state)[0]},
                {**state, "extra.weight": torch.zeros(1)}):
        with pytest.raises(learned.InvalidArgument, match=f"not the {arch} layout"):
            learned.load_backbone(_save(tmp_path / "bad.safetensors", bad))
    first = sorted(k for k in state if k.endswith("weight"))[0]
    wrong = {**state, first: torch.zeros(*state[first].shape[:-1], state[first].shape[-1] + 1)}
    with pytest.raises(learned.InvalidArgument, match="size mismatch"):
        learned.load_backbone(_save(tmp_path / "bad.safetensors", wrong))


def test_fid_inception_features_and_frechet_distance(tmp_path, rng, frames):
    from scipy import linalg

    module, state = _random_state("inception-v3-fid")
    net = learned.load_backbone(_save(tmp_path / "fid.safetensors", state), "fid")
    x = frames(rng, frames=2, height=48, width=64)
    got = learned.fid_features(net, x)
    # pytorch-fid: [0, 1] -> bilinear 299x299 -> 2x - 1 -> pool after Mixed_7c
    t = torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255
    t = 2 * F.interpolate(t, size=(299, 299), mode="bilinear", align_corners=False) - 1
    with torch.no_grad():
        want = module(t)[0].flatten(1).double().numpy()
    assert got.shape == (2, 2048) and np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    # the Frechet distance against scipy.linalg.sqrtm written out
    a = rng.normal(0, 1, (60, 6)) @ rng.normal(0, 1, (6, 6))
    b = rng.normal(0.5, 1, (80, 6)) @ rng.normal(0, 1, (6, 6))
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    ref = (np.sum((a.mean(0) - b.mean(0)) ** 2) + np.trace(s1 + s2)
           - 2 * np.trace(linalg.sqrtm(s1 @ s2).real))
    assert learned.frechet_distance(a, b) == pytest.approx(ref, rel=1e-9)


def _lpips_by_hand(state, trunk, x_u8, y_u8):
    """LPIPS written out with torch.nn.functional on the file's tensors."""
    layers, taps = backbones.LPIPS_TRUNKS[trunk]

    def feats(u8):
        h = torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 127.5 - 1
        h = (h - torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)) / \
            torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)
        out = []
        for i, spec in enumerate(layers):
            if spec == "R":
                h = F.relu(h)
            elif spec == "M":
                h = F.max_pool2d(h, 3, 2) if trunk == "alex" else F.max_pool2d(h, 2, 2)
            else:
                h = F.conv2d(h, state[f"features.{i}.weight"], state[f"features.{i}.bias"],
                             stride=spec[3], padding=spec[4])
            if i in taps:
                out.append(h)
        return out

    total = 0
    for i, (a, b) in enumerate(zip(feats(x_u8), feats(y_u8), strict=True)):
        na, nb = a / (a.norm(dim=1, keepdim=True) + 1e-10), b / (b.norm(dim=1, keepdim=True) + 1e-10)
        w = state[f"lin{i}.model.1.weight"].view(1, -1, 1, 1)
        total = total + ((na - nb) ** 2 * w).sum(1).mean(dim=(1, 2))
    return total.double().numpy()


@pytest.mark.parametrize("trunk,size", [("alex", 64), ("vgg16", 32)])
def test_lpips_standard_trunk_matches_the_definition(trunk, size, tmp_path, rng, frames):
    _, state = _random_state(f"lpips-{trunk}")
    net = learned.load_backbone(_save(tmp_path / "lpips.safetensors", state), "lpips")
    x = frames(rng, frames=2, height=size, width=size)
    y = frames(rng, frames=2, height=size, width=size)
    got = learned.lpips_frames(net, x, y)
    np.testing.assert_allclose(got, _lpips_by_hand(state, trunk, x, y), rtol=1e-4)
    assert np.all(got > 0)
    np.testing.assert_allclose(learned.lpips_frames(net, x, x), 0.0, atol=1e-12)


def test_i3d_fvd_features_are_the_time_averaged_logits(tmp_path, rng, frames):
    module, state = _random_state("i3d-kinetics400")
    net = learned.load_backbone(_save(tmp_path / "fvd.safetensors", state), "fvd")
    assert net.input == {"size": [224, 224], "clip_frames": 16}
    net.input["size"] = [64, 64]  # fully convolutional: a small size keeps the test fast
    clip = frames(rng, frames=16, height=48, width=64)
    got = learned.fvd_features(net, clip)
    t = torch.from_numpy(clip).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
    t = F.interpolate(t[0].permute(1, 0, 2, 3), size=(64, 64), mode="bilinear",
                      align_corners=False).permute(1, 0, 2, 3)[None]
    with torch.no_grad():
        want = module(t)[0].flatten(2).mean(-1).double().numpy()
    assert got.shape == (1, 400) and np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_wrong_metric_or_unknown_keys_are_one_line(tmp_path, rng, capsys):
    _, state = _random_state("lpips-alex")
    path = _save(tmp_path / "x.safetensors", state)
    with pytest.raises(learned.InvalidArgument, match="not a FID backbone"):
        learned.load_backbone(path, "fid")
    weights = tmp_path / "w"
    weights.mkdir()
    _save(weights / "lpips.safetensors", {"conv.weight": torch.zeros(2, 3, 1, 1)})
    _sums(weights)
    gt = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    np.savez(tmp_path / "gt.npz", rgb=gt)
    args = ["eval", "pair", str(tmp_path / "gt.npz"), str(tmp_path / "gt.npz"),
            "--out", str(tmp_path / "o"), "--weights", str(weights)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "match no known architecture" in err[0]


def test_standard_weights_through_k4d_eval_pair(tmp_path, rng, frames, capsys):
    """The CLI with standard files: a missing one and a wrong sha256 are one line each."""
    weights = tmp_path / "w"
    weights.mkdir()
    _save(weights / "lpips.safetensors", _random_state("lpips-alex")[1])
    _save(weights / "fid.safetensors", _random_state("inception-v3-fid", 1)[1])
    _sums(weights)
    x = frames(rng, frames=2, height=64, width=64)
    np.savez(tmp_path / "gt.npz", rgb=x)
    np.savez(tmp_path / "pred.npz", rgb=np.clip(x.astype(int) + 50, 0, 255).astype(np.uint8))
    args = ["eval", "pair", str(tmp_path / "pred.npz"), str(tmp_path / "gt.npz"),
            "--out", str(tmp_path / "o"), "--weights", str(weights)]
    assert main(args) == 2  # fvd.safetensors is absent
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FVD needs its backbone weights" in err[0] and "fvd.safetensors" in err[0]
    with open(weights / "lpips.safetensors", "ab") as f:
        f.write(b"\0")
    with pytest.raises(learned.IntegrityError, match="sha256"):
        learned.verified_file(weights, "lpips.safetensors", "LPIPS")


def _converter():
    path = Path(__file__).resolve().parents[3] / "tools" / "convert_metric_weights.py"
    return load_path_module(path, "convert_metric_weights")


def test_converter_from_official_lpips_layout(tmp_path, capsys):
    """torchvision's alexnet .pth (features + classifier) and LPIPS' v0.1 lins .pth ->
    one safetensors that loads as lpips-alex; the printed sha256 is the file's."""
    _, state = _random_state("lpips-alex")
    trunk = {k: v for k, v in state.items() if k.startswith("features.")}
    trunk["classifier.1.weight"] = torch.zeros(4, 9216)
    lins = {k: v for k, v in state.items() if k.startswith("lin")}
    torch.save(trunk, tmp_path / "alexnet.pth")
    torch.save(lins, tmp_path / "alex.pth")
    convert = _converter()
    out = tmp_path / "w" / "lpips.safetensors"
    assert convert.main(["lpips", str(tmp_path / "alexnet.pth"), str(tmp_path / "alex.pth"),
                         "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line == f"{hashlib.sha256(out.read_bytes()).hexdigest()}  lpips.safetensors"
    assert learned.load_backbone(out, "lpips").arch == "lpips-alex"
    assert set(load_file(str(out))) == set(state)
    # LPIPS' full-model state dict (net.sliceK.N, scaling_layer) converts the same way
    full = {f"net.slice1.{k.split('.', 1)[1]}" if k.startswith("features.") else k: v
            for k, v in state.items()}
    full["scaling_layer.shift"] = torch.zeros(1, 3, 1, 1)
    torch.save(full, tmp_path / "full.pth")
    assert convert.main(["lpips", str(tmp_path / "full.pth"), "-o", str(tmp_path / "b.safetensors")]) == 0
    assert set(load_file(str(tmp_path / "b.safetensors"))) == set(state)
    with pytest.raises(SystemExit, match="not a FID backbone"):
        convert.main(["fid", str(tmp_path / "full.pth"), "-o", str(tmp_path / "c.safetensors")])
