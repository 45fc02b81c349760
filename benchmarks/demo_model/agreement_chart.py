"""Success agreement per split for several models, as one bar chart (issue 21, round 22).

Each `--model NAME=PATTERN` names a `k4d eval` report per split: PATTERN holds `{split}`
(e.g. `.k4d/abl/N21/{split}/ship/eval/report.json`, the ablation harness's layout, or a
`k4d eval run` directory's `report.json`). The chart shows, per split, how many episodes
the judge's verdict on each model's rollout agrees with the episode's true label, and
prints the same as a table with the pooled counts:

    python benchmarks/demo_model/agreement_chart.py --splits h9013,s4639,s6703 \
        --model 'shipped=.k4d/ev/{split}/report.json' \
        --model 'recipe=.k4d/abl/N21/{split}/ship/eval/report.json' --out chart.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def agreement(report_path: Path) -> tuple[int, int]:
    """(episodes whose simulated success equals the true one, episodes judged): the
    report's own `policy.agreement` confusion matrix."""
    agreed = json.loads(report_path.read_text())["policy"]["agreement"]
    return agreed["confusion"]["tp"] + agreed["confusion"]["tn"], agreed["episodes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", required=True, help="comma-separated split names")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=PATTERN")
    parser.add_argument("--title", default="success agreement with the true label")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    splits = args.splits.split(",")
    models = [spec.partition("=")[::2] for spec in args.model]
    counts = {name: [agreement(Path(pattern.format(split=s))) for s in splits]
              for name, pattern in models}

    print("| split | " + " | ".join(name for name, _ in models) + " |")
    print("|---" * (len(models) + 1) + "|")
    for i, split in enumerate(splits):
        print(f"| {split} | " + " | ".join(f"{counts[n][i][0]}/{counts[n][i][1]}"
                                           for n, _ in models) + " |")
    pooled = {n: (sum(a for a, _ in c), sum(b for _, b in c)) for n, c in counts.items()}
    print("| pooled | " + " | ".join(f"{a}/{b}" for a, b in pooled.values()) + " |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(splits), 4.2))
    width = 0.8 / len(models)
    for k, (name, _) in enumerate(models):
        shares = [a / b for a, b in counts[name]]
        xs = [i + (k - (len(models) - 1) / 2) * width for i in range(len(splits))]
        ax.bar(xs, shares, width, label=f"{name} ({pooled[name][0]}/{pooled[name][1]})")
    ax.axhline(0.85, color="k", lw=0.8, ls="--", label="goal 5 (0.85)")
    ax.set_xticks(range(len(splits)), [f"{s}\n({counts[models[0][0]][i][1]})"
                                       for i, s in enumerate(splits)], fontsize=8)
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("agreement")
    ax.set_title(args.title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=len(models) + 1)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
