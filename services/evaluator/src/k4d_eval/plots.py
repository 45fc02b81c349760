"""Pictures of a report: per-frame metric plots and a ground truth / prediction / error
strip (PNG)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from k4d_eval.clip import Clip

PER_FRAME_PNG = "per_frame.png"
STRIP_PNG = "strip.png"
PLOTTED = (("psnr", "PSNR (dB)"), ("ssim", "SSIM"), ("chamfer_l1", "Chamfer L1 (m)"),
           ("fscore", "F-score"), ("chamfer_l1_k4d", "Chamfer L1 (Kinema4D norm.)"),
           ("depth_absrel", "depth AbsRel"))


def plot_per_frame(path: Path, report: Mapping) -> Path:
    """One panel per metric, the model and the static-world floor over frame index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [(report.get("method", "model"), report["per_frame"], "tab:blue")]
    if report.get("baseline"):
        series.append(("static-world", report["baseline"]["per_frame"], "tab:gray"))
    panels = [(k, label) for k, label in PLOTTED if k in report["per_frame"]]
    cols = 3
    rows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, panels, strict=False):
        for name, per_frame, colour in series:
            values = np.array([np.nan if v is None else v for v in per_frame.get(key, [])])
            ax.plot(np.arange(len(values)), values, label=name, color=colour, lw=1.5)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("frame")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _colourise(values: np.ndarray, vmax: float) -> np.ndarray:
    """(H, W) non-negative -> (H, W, 3) uint8 through matplotlib's 'magma'."""
    from matplotlib import colormaps

    scaled = np.clip(values / max(vmax, 1e-12), 0, 1)
    return (colormaps["magma"](scaled)[..., :3] * 255).astype(np.uint8)


def strip(path: Path, pred: Clip, gt: Clip, columns: int = 6, width: int = 240) -> Path:
    """Rows: ground truth, prediction, |RGB error|, and |depth error| when both have
    depth; `columns` frames spread over the clip, each `width` pixels wide. A left margin
    names each row (the error rows with their colour scale, magma: black = 0) and a header
    gives each column's frame index."""
    from PIL import Image, ImageDraw, ImageFont

    T, H, W = gt.rgb.shape[:3]
    frames = np.unique(np.linspace(0, T - 1, min(columns, T)).round().astype(int))
    rgb_err = np.abs(pred.rgb.astype(np.int16) - gt.rgb.astype(np.int16)).mean(axis=-1)
    rows = [gt.rgb[frames], pred.rgb[frames],
            np.stack([_colourise(rgb_err[t], 128.0) for t in frames])]
    labels = ["ground truth", "prediction", "|RGB error|\nmagma 0..128\n(of 255)"]
    if pred.depth is not None and gt.depth is not None:
        both = (pred.depth > 0) & (gt.depth > 0)
        depth_err = np.where(both, np.abs(pred.depth - gt.depth), 0)
        vmax = float(np.percentile(depth_err[both], 99)) if both.any() else 1.0
        rows.append(np.stack([_colourise(depth_err[t], vmax) for t in frames]))
        labels.append(f"|depth error|\nmagma 0..{vmax:.3g} m")
    height = max(1, round(H * width / W))
    tiles = [[Image.fromarray(img).resize((width, height), Image.BILINEAR) for img in row]
             for row in rows]
    margin, header = 110, 16
    canvas = Image.new("RGB", (margin + width * len(frames), header + height * len(rows)), (255, 255, 255))
    draw, font = ImageDraw.Draw(canvas), ImageFont.load_default()
    for c, t in enumerate(frames):
        draw.text((margin + c * width + 4, 2), f"frame {int(t)}", fill=(0, 0, 0), font=font)
    for r, row in enumerate(tiles):
        draw.multiline_text((4, header + r * height + 4), labels[r], fill=(0, 0, 0), font=font)
        for c, tile in enumerate(row):
            canvas.paste(tile, (margin + c * width, header + r * height))
    canvas.save(path)
    return path
