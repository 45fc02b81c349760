"""Learned metrics: LPIPS, FID, FVD and the latent L2 with the generator's VAE.

Their backbones' pretrained weights cannot be downloaded here, and torchmetrics' LPIPS/FID
backends need torchvision / torch-fidelity, which do not import beside our torch
(docs/adr/007-evaluation-metric-libraries.md).
So the metric DEFINITIONS are implemented here on a backbone loaded from safetensors:

- a weights directory (path, file:// or s3://) holds `lpips.safetensors`,
  `fid.safetensors`, `fvd.safetensors` and `SHA256SUMS` (sha256sum format); every file is
  verified before use, a missing one is one line naming it;
- a backbone file carries its architecture as data in the safetensors metadata
  (`k4d_eval.layers`: a JSON list of conv2d/conv3d/relu/maxpool/avgpool layers, `tap`
  marking the feature outputs; `k4d_eval.input`: input size and normalisation), so no code
  is unpickled. `ALEXNET_LAYERS` is LPIPS' AlexNet in this form;
- or it is one of the standard backbones (k4d_eval.backbones: pytorch-fid's InceptionV3,
  LPIPS' AlexNet/VGG16 with its linear heads, InceptionI3d), recognised from its keys (the
  published files' names, converted by tools/convert_metric_weights.py) or named by its
  `k4d_eval.arch` metadata; these give numbers comparable with published ones
  (docs/evaluation.md).

Definitions:
  LPIPS (Zhang et al. 2018): sum over taps l of the spatial mean of
        w_l . (f_l(x)/|f_l(x)| - f_l(y)/|f_l(y)|)^2, channel-normalised features, inputs in
        [-1, 1] shifted/scaled by the file's normalisation; per frame, then the mean.
  FID:  Frechet distance between Gaussians fitted to the last tap's globally pooled
        features of every predicted and every ground-truth frame:
        |mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)).
  FVD:  the same on a 3D backbone's features of `clip_frames`-frame windows of each video.
  latent L2: mean squared difference of the VAE's (normalised) latent means of the
        predicted and ground-truth videos (the generator's own AutoencoderKLWan).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from k4d.errors import FailedPrecondition, IntegrityError, InvalidArgument

from k4d_eval.stats import MetricInfo

# What LearnedMetrics reports: one value per evaluation (FID and FVD are distances between
# distributions, so not per-frame statistics), all distances: lower is better.
OUTPUTS = (MetricInfo("lpips", higher_is_better=False),
           MetricInfo("fid", higher_is_better=False, fmt=".2f"),
           MetricInfo("fvd", higher_is_better=False, fmt=".2f"),
           MetricInfo("latent_l2", higher_is_better=False))
WEIGHT_FILES = {"lpips": "lpips.safetensors", "fid": "fid.safetensors", "fvd": "fvd.safetensors"}
SUMS_FILE = "SHA256SUMS"
LAYERS_KEY, INPUT_KEY = "k4d_eval.layers", "k4d_eval.input"
ARCH_KEY = "k4d_eval.arch"  # a standard architecture's name (k4d_eval.backbones)
# LPIPS' AlexNet (torchvision layout; taps after relu1..relu5) and its input scaling layer.
ALEXNET_LAYERS = [
    {"op": "conv2d", "name": "features.0", "in": 3, "out": 64, "kernel": 11, "stride": 4, "padding": 2},
    {"op": "relu", "tap": True}, {"op": "maxpool", "kernel": 3, "stride": 2},
    {"op": "conv2d", "name": "features.3", "in": 64, "out": 192, "kernel": 5, "padding": 2},
    {"op": "relu", "tap": True}, {"op": "maxpool", "kernel": 3, "stride": 2},
    {"op": "conv2d", "name": "features.6", "in": 192, "out": 384, "kernel": 3, "padding": 1},
    {"op": "relu", "tap": True},
    {"op": "conv2d", "name": "features.8", "in": 384, "out": 256, "kernel": 3, "padding": 1},
    {"op": "relu", "tap": True},
    {"op": "conv2d", "name": "features.10", "in": 256, "out": 256, "kernel": 3, "padding": 1},
    {"op": "relu", "tap": True},
]
LPIPS_INPUT = {"shift": [-0.030, -0.088, -0.188], "scale": [0.458, 0.448, 0.450]}


def _torch():
    try:
        import torch
    except ImportError:
        raise FailedPrecondition("LPIPS/FID/FVD/latent L2 need torch: pip install "
                                 "'k4d-evaluator[learned]'") from None
    return torch


# ---- weights ----------------------------------------------------------------------------
def resolve_weights_dir(uri: str, scratch: Path) -> Path:
    """A local directory with the weight files (an s3:// URI is copied file by file)."""
    if uri.startswith("s3://"):
        from k4d.episodes.location import open_location

        loc = open_location(uri)
        for name in (*WEIGHT_FILES.values(), SUMS_FILE):
            data = loc.read_bytes(name)
            if data is not None:
                (scratch / name).write_bytes(data)
        return scratch
    path = Path(uri[len("file://"):] if uri.startswith("file://") else uri)
    if not path.is_dir():
        raise InvalidArgument.for_field("weights", f"not a directory: {uri}")
    return path


def verified_file(directory: Path, name: str, metric: str) -> Path:
    """directory/name after checking its sha256 against directory/SHA256SUMS."""
    return verified_file_sha256(directory, name, metric)[0]


def verified_file_sha256(directory: Path, name: str, metric: str) -> tuple[Path, str]:
    """(directory/name, its sha256) after checking the sha256 against directory/SHA256SUMS."""
    from k4d.tensor_io import sha256_file

    path = directory / name
    if not path.is_file():
        raise FailedPrecondition(f"{metric} needs its backbone weights: expected {path} "
                                 "(docs/evaluation.md says how to make it)")
    sums = directory / SUMS_FILE
    expected = {}
    if sums.is_file():
        for line in sums.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                expected[parts[1].lstrip("*")] = parts[0].lower()
    if name not in expected:
        raise FailedPrecondition(f"{metric}: no sha256 for {name} in {sums} (one line "
                                 f"'<sha256>  {name}', as sha256sum writes it)")
    actual = sha256_file(path)
    if actual != expected[name]:
        raise IntegrityError(f"{metric}: {path} has sha256 {actual}, {sums} says {expected[name]}")
    return path, actual


# ---- backbones as data ------------------------------------------------------------------
def build_backbone(layers: list[dict]):
    """-> torch module whose forward returns the list of tapped activations."""
    torch = _torch()
    nn = torch.nn

    class Backbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.ops = nn.ModuleList()
            self.taps = []
            for spec in layers:
                op = spec["op"]
                if op in ("conv2d", "conv3d"):
                    conv = nn.Conv2d if op == "conv2d" else nn.Conv3d
                    module = conv(spec["in"], spec["out"], spec["kernel"],
                                  stride=spec.get("stride", 1), padding=spec.get("padding", 0))
                elif op == "relu":
                    module = nn.ReLU()
                elif op == "maxpool":
                    module = nn.MaxPool2d(spec["kernel"], spec.get("stride"))
                elif op == "maxpool3d":
                    module = nn.MaxPool3d(spec["kernel"], spec.get("stride"))
                else:
                    raise InvalidArgument.for_field("backbone", f"unknown layer op {op!r}")
                self.ops.append(module)
                self.taps.append(bool(spec.get("tap")))
            self.names = [spec.get("name") for spec in layers]

        def forward(self, x):
            out = []
            for module, tap in zip(self.ops, self.taps, strict=True):
                x = module(x)
                if tap:
                    out.append(x)
            return out

    return Backbone()


@dataclass
class LoadedBackbone:
    module: object
    extra: dict  # tensors not in the layers (LPIPS' lin weights)
    input: dict
    arch: str = "layers"  # a k4d_eval.backbones name, or "layers" (architecture as data)


def load_backbone(path: Path, metric: str | None = None) -> LoadedBackbone:
    """A backbone file: architecture as data (`k4d_eval.layers` metadata) or one of the
    standard architectures (k4d_eval.backbones), named or recognised from its keys."""
    from safetensors import safe_open

    _torch()
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if LAYERS_KEY not in meta:
        return load_standard(path, tensors, meta.get(ARCH_KEY), metric)
    layers = json.loads(meta[LAYERS_KEY])
    module = build_backbone(layers)
    state, extra = {}, {}
    for key, value in tensors.items():
        prefix, _, leaf = key.rpartition(".")
        if prefix in module.names:
            state[f"ops.{module.names.index(prefix)}.{leaf}"] = value
        else:
            extra[key] = value
    missing = set(module.state_dict()) - set(state)
    if missing:
        raise InvalidArgument.for_field(str(path), f"missing backbone tensors for {sorted(missing)[:3]}")
    module.load_state_dict(state)
    module.eval()
    return LoadedBackbone(module, extra, json.loads(meta.get(INPUT_KEY, "{}")))


def load_standard(path: Path, tensors: dict, arch: str | None = None,
                  metric: str | None = None) -> LoadedBackbone:
    """A standard backbone (k4d_eval.backbones) from a converted official weight file:
    the architecture named by `arch` (the file's `k4d_eval.arch` metadata) or recognised
    from its keys; every tensor must be consumed, none missing."""
    from k4d_eval import backbones

    names = ", ".join(backbones.ARCHITECTURES)
    arch = arch or backbones.detect(tensors)
    if arch is None:
        raise InvalidArgument.for_field(str(path), f"its tensors match no known architecture "
                                        f"({names}) and it has no {LAYERS_KEY!r} metadata; "
                                        "convert it with tools/convert_metric_weights.py")
    if arch not in backbones.ARCHITECTURES:
        raise InvalidArgument.for_field(str(path), f"unknown architecture {arch!r} ({names})")
    if metric and arch not in backbones.METRIC_ARCHITECTURES[metric]:
        raise InvalidArgument.for_field(str(path), f"holds {arch}, not a {metric.upper()} backbone")
    factory, input_spec = backbones.ARCHITECTURES[arch]
    module = factory()
    state = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    expected = backbones.expected_keys(arch)
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise InvalidArgument.for_field(str(path), f"not the {arch} layout: missing "
                                        f"{missing[:3]} ({len(missing)}), unexpected "
                                        f"{unexpected[:3]} ({len(unexpected)})")
    try:
        module.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # wrong shapes
        raise InvalidArgument.for_field(str(path), f"not the {arch} layout: "
                                        f"{str(exc).splitlines()[-1].strip()}") from None
    module.eval()
    extra = {}
    if arch.startswith("lpips"):
        extra = {f"lin{i}.weight": w for i, w in enumerate(module.lin_weights())}
    return LoadedBackbone(module, extra, dict(input_spec), arch)


def _frames_tensor(rgb: np.ndarray, spec: dict):
    """(N, H, W, 3) uint8 -> (N, 3, H', W') float in [-1, 1], resized, scaled as `spec` says."""
    torch = _torch()
    x = torch.from_numpy(np.ascontiguousarray(rgb)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    if spec.get("size"):
        x = torch.nn.functional.interpolate(x, size=tuple(spec["size"]), mode="bilinear",
                                            align_corners=False)
    if "shift" in spec:
        x = (x - torch.tensor(spec["shift"]).view(1, 3, 1, 1)) / torch.tensor(spec["scale"]).view(1, 3, 1, 1)
    return x


# ---- metric definitions -----------------------------------------------------------------
def lpips_frames(net: LoadedBackbone, pred: np.ndarray, gt: np.ndarray, batch: int = 8) -> np.ndarray:
    """(T,) LPIPS per frame of two (T, H, W, 3) uint8 clips."""
    torch = _torch()
    lins = [net.extra[f"lin{i}.weight"] for i in range(sum(net.module.taps))]
    out = []
    with torch.no_grad():
        for s in range(0, len(pred), batch):
            fx = net.module(_frames_tensor(pred[s:s + batch], net.input))
            fy = net.module(_frames_tensor(gt[s:s + batch], net.input))
            total = 0
            for a, b, w in zip(fx, fy, lins, strict=True):
                a = a / (a.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
                b = b / (b.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
                total = total + torch.nn.functional.conv2d((a - b) ** 2, w).mean(dim=(1, 2, 3))
            out.append(total.double().numpy())
    return np.concatenate(out)


def pooled_features(net: LoadedBackbone, x) -> np.ndarray:
    """Global average of the last tap -> (N, C) float64."""
    torch = _torch()
    with torch.no_grad():
        last = net.module(x)[-1]
        return last.flatten(2).mean(-1).double().numpy()


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to feature rows a (N, C) and b (M, C)."""
    import warnings

    from scipy import linalg

    mu1, mu2 = a.mean(0), b.mean(0)
    s1 = np.atleast_2d(np.cov(a, rowvar=False))
    s2 = np.atleast_2d(np.cov(b, rowvar=False))
    with warnings.catch_warnings():  # a singular product is handled just below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean, _ = linalg.sqrtm(s1 @ s2, disp=False)
    if not np.isfinite(covmean).all():  # singular product: the usual epsilon offset
        eps = np.eye(len(s1)) * 1e-6
        covmean = linalg.sqrtm((s1 + eps) @ (s2 + eps))
    covmean = covmean.real
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def fid_features(net: LoadedBackbone, rgb: np.ndarray, batch: int = 16) -> np.ndarray:
    return np.concatenate([pooled_features(net, _frames_tensor(rgb[s:s + batch], net.input))
                           for s in range(0, len(rgb), batch)])


def fvd_features(net: LoadedBackbone, rgb: np.ndarray) -> np.ndarray:
    """One feature row per window of `clip_frames` frames (default 16, stride = window)."""
    window = int(net.input.get("clip_frames", 16))
    rows = []
    for s in range(0, max(1, len(rgb) - window + 1), window):
        x = _frames_tensor(rgb[s:s + window], net.input)  # (t, 3, H, W)
        rows.append(pooled_features(net, x.permute(1, 0, 2, 3)[None]))
    return np.concatenate(rows)


def latent_l2(vae, pred: np.ndarray, gt: np.ndarray) -> float:
    """Mean squared difference of normalised VAE latent means of two (T, H, W, 3) clips."""
    torch = _torch()

    def encode(rgb):
        x = torch.from_numpy(np.ascontiguousarray(rgb)).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
        with torch.no_grad():
            z = vae.encode(x).latent_dist.mean
        cfg = vae.config
        if getattr(cfg, "latents_mean", None) is not None:
            mean = torch.tensor(cfg.latents_mean).view(1, -1, 1, 1, 1)
            std = torch.tensor(cfg.latents_std).view(1, -1, 1, 1, 1)
            z = (z - mean) / std
        return z.double()

    return float(((encode(pred) - encode(gt)) ** 2).mean())


class LearnedMetrics:
    """Callable (preds, gts: lists of Clip) -> {lpips, fid, fvd, latent_l2} (those set up).
    `sources`: metric -> what produced it (file, sha256, architecture), see `describe`."""

    def __init__(self, lpips=None, fid=None, fvd=None, vae=None, sources: dict | None = None):
        self.lpips, self.fid, self.fvd, self.vae = lpips, fid, fvd, vae
        self.sources = dict(sources or {})

    @classmethod
    def from_args(cls, weights: str | None, vae_dir: str | None) -> LearnedMetrics:
        nets, sources = {}, {}
        if weights:
            with tempfile.TemporaryDirectory(prefix="k4d-eval-weights-") as scratch:
                directory = resolve_weights_dir(weights, Path(scratch))
                for metric, name in WEIGHT_FILES.items():
                    path, sha256 = verified_file_sha256(directory, name, metric.upper())
                    nets[metric] = load_backbone(path, metric)
                    sources[metric] = {"weights": weights, "file": name, "sha256": sha256,
                                       "architecture": nets[metric].arch}
        vae = load_vae(vae_dir) if vae_dir else None
        if vae is not None:
            sources["latent_l2"] = {"vae": str(Path(vae_dir) / "vae"),
                                    "architecture": type(vae).__name__}
        return cls(nets.get("lpips"), nets.get("fid"), nets.get("fvd"), vae, sources)

    def describe(self) -> dict:
        """metric -> {weights (the --weights given), file, sha256, architecture ("layers":
        the architecture is the file's own metadata)}; for latent_l2 the VAE directory.
        Recorded in report.json settings.learned_metrics: which backbone made each number."""
        return {k: dict(v) for k, v in self.sources.items()}

    def __call__(self, preds, gts) -> dict:
        out = {}
        if self.lpips is not None:
            values = np.concatenate([lpips_frames(self.lpips, p.rgb, g.rgb)
                                     for p, g in zip(preds, gts, strict=True)])
            out["lpips"] = float(values.mean())
        if self.fid is not None:
            out["fid"] = frechet_distance(np.concatenate([fid_features(self.fid, p.rgb) for p in preds]),
                                          np.concatenate([fid_features(self.fid, g.rgb) for g in gts]))
        if self.fvd is not None:
            out["fvd"] = frechet_distance(np.concatenate([fvd_features(self.fvd, p.rgb) for p in preds]),
                                          np.concatenate([fvd_features(self.fvd, g.rgb) for g in gts]))
        if self.vae is not None:
            out["latent_l2"] = float(np.mean([latent_l2(self.vae, p.rgb, g.rgb)
                                              for p, g in zip(preds, gts, strict=True)]))
        return out


def load_vae(model_dir: str):
    """The generator model directory's `vae/` (diffusers AutoencoderKLWan), local files only."""
    _torch()
    path = Path(model_dir) / "vae"
    if not (path / "config.json").is_file():
        raise FailedPrecondition(f"latent L2 needs the generator's VAE: expected {path}/config.json")
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan.from_pretrained(str(path), local_files_only=True).eval()
