"""CLI: `k4d eval` (predictions vs a dataset), `k4d eval pair`, `k4d eval run`,
`k4d eval agreement`. Bad input is one line and exit code 2 (k4d.cli.main)."""

from __future__ import annotations

import argparse
from pathlib import Path

from k4d.errors import InvalidArgument

from k4d_eval.evaluate import DEFAULT_GEOMETRY_PIXELS, Settings
from k4d_eval.geometry import DEFAULT_TAU


def _settings_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tau", type=float, default=DEFAULT_TAU,
                   help=f"F-score distance threshold (default {DEFAULT_TAU}; metres, and the "
                        "same number in the Kinema4D normalisation)")
    p.add_argument("--geometry-pixels", type=int, default=DEFAULT_GEOMETRY_PIXELS,
                   help="pixels sampled per frame for Chamfer/F-score, the same pixels of "
                        f"prediction and ground truth (default {DEFAULT_GEOMETRY_PIXELS}; 0 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pixel sample (default 0)")
    p.add_argument("--weights", type=str, default="",
                   help="directory or URI holding the LPIPS/FID/FVD backbone weights "
                        "(docs/evaluation.md names the files); without it those metrics are "
                        "left out")
    p.add_argument("--vae", type=str, default="",
                   help="generator model directory whose VAE gives the latent L2 (optional)")


def _learned(args):
    if not (args.weights or args.vae):
        return None
    from k4d_eval.learned import LearnedMetrics

    return LearnedMetrics.from_args(args.weights or None, args.vae or None)


def _settings(args) -> Settings:
    settings = Settings(tau=args.tau, geometry_pixels=args.geometry_pixels, seed=args.seed)
    settings.check()
    return settings


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="evaluate generated rollouts against ground truth (video + geometry "
                     "metrics, regions, static-world floor, policy agreement)",
        description="Without a subcommand: predictions (one `k4d simulate` output directory "
                    "per episode id) against a data engine dataset. Writes OUT/report.json, "
                    "summary.md, summary.csv, per_frame.png, strip.png and "
                    "OUT/comparison/<episode_id>.rrd (Rerun; `k4d view OUT`).")
    p.add_argument("--pred", help="directory or URI (file://, s3://) of prediction directories "
                                  "named by episode id")
    p.add_argument("--gt", help="data engine dataset (path, file://, s3://)")
    p.add_argument("--baseline", default="",
                   help="static-world outputs named by episode id (default: generated with "
                        "`k4d simulate --backend static-world` into OUT/static-world)")
    p.add_argument("--no-baseline", action="store_true", help="leave the static-world floor out")
    p.add_argument("--out", type=Path, help="output directory")
    p.add_argument("--episodes", nargs="+", default=None, help="only these episode ids")
    p.add_argument("--workers", type=int, default=1, help="episodes evaluated in parallel")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _settings_arguments(p)
    p.set_defaults(handler=_run_eval)
    sub = p.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", parser_class=type(p))

    q = sub.add_parser("pair", help="one pair of NPZ files (DESIGN.md keys rgb, pointmap, mask; "
                                    "the ground truth may hold robot_mask)")
    q.add_argument("pred_npz", type=Path, help="prediction NPZ")
    q.add_argument("gt_npz", type=Path, help="ground-truth NPZ")
    q.add_argument("--out", type=Path, required=True, help="output directory")
    q.add_argument("--camera", type=Path, default=None,
                   help="camera JSON (DESIGN.md form) of the pair: with it OUT/comparison.rrd, "
                        "a Rerun recording of ground truth beside prediction, is written too")
    _settings_arguments(q)
    q.set_defaults(handler=_run_pair)

    r = sub.add_parser("run", help="generate the held-out episodes with a model (and the "
                                   "static-world floor), then evaluate them; resumable (rollouts "
                                   "of another model, by its content, are made again)")
    r.add_argument("--model", required=True, help="model for `k4d simulate --model` "
                                                  "(registry name[/version] or directory)")
    r.add_argument("--data", required=True, help="data engine dataset (path, file://, s3://)")
    r.add_argument("--out", type=Path, required=True, help="output directory")
    r.add_argument("--episodes", nargs="+", default=None, help="only these episode ids")
    r.add_argument("--workers", type=int, default=1, help="episodes generated in parallel")
    r.add_argument("--steps", type=int, default=0, help="sampler steps (default: the model's)")
    r.add_argument("--backend", default="", help="generator backend for the model")
    r.add_argument("--no-baseline", action="store_true", help="leave the static-world floor out")
    r.add_argument("--depth", action="store_true",
                   help="give the model and the floor each episode's first-frame depth too "
                        "(an RGB-D observation; `k4d simulate --depth`); rollouts made "
                        "without it are made again")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    _settings_arguments(r)
    r.set_defaults(handler=_run_run)

    a = sub.add_parser("agreement", help="policy-evaluation agreement from a table of success "
                                         "labels (CSV or JSON rows: policy, task, scene, "
                                         "true_success, simulated_success)")
    a.add_argument("labels", type=Path, help="CSV with a header row, or a JSON list of objects")
    a.add_argument("--out", type=Path, required=True, help="output directory")
    a.set_defaults(handler=_run_agreement)


def _run_pair(args) -> int:
    from k4d_eval.eval_runs import eval_pair

    camera = args.camera if args.camera is not None and _can_record("eval pair") else None
    if args.camera is None:
        print("k4d eval pair: no comparison recording: the NPZ pair holds no camera "
              "(pass --camera CAM.json to write OUT/comparison.rrd)")
    report = eval_pair(args.pred_npz, args.gt_npz, args.out, _settings(args), _learned(args),
                       camera_path=camera)
    _print_headline(report, args.out)
    return 0


def _run_eval(args) -> int:
    from k4d_eval.eval_runs import check_local_predictions, eval_dataset

    missing = [f"--{n}" for n in ("pred", "gt", "out") if not getattr(args, n)]
    if missing:
        raise InvalidArgument(f"missing {', '.join(missing)} (or use `k4d eval pair` / `k4d eval run`)")
    _check_workers(args.workers)
    settings = _settings(args)
    check_local_predictions(args.pred, args.gt, args.episodes)
    baseline = args.baseline or None
    if baseline is None and not args.no_baseline:
        from k4d_eval.generate import generate_baseline

        baseline = str(generate_baseline(args.gt, args.out, args.episodes, args.workers,
                                         not args.no_progress))
    report = eval_dataset(args.pred, args.gt, args.out, settings, baseline_uri=baseline,
                          episodes=args.episodes, workers=args.workers,
                          progress=not args.no_progress, learned_metrics=_learned(args),
                          record=_can_record("eval"))
    _print_headline(report, args.out)
    return 0


def _run_run(args) -> int:
    from k4d_eval.generate import run_and_evaluate

    _check_workers(args.workers)
    report = run_and_evaluate(args.model, args.data, args.out, _settings(args),
                              episodes=args.episodes, workers=args.workers,
                              baseline=not args.no_baseline, steps=args.steps,
                              backend=args.backend, progress=not args.no_progress,
                              learned_metrics=_learned(args), record=_can_record("eval run"),
                              depth=args.depth)
    _print_headline(report, args.out)
    return 0


def _run_agreement(args) -> int:
    from k4d_eval.agreement_io import read_labels, write_agreement

    section = write_agreement(args.out, read_labels(args.labels))
    a = section["agreement"]
    print(f"{a['episodes']} labelled rollouts: accuracy {a['accuracy']}, success rate "
          f"true {a['success_rate_true']} vs simulated {a['success_rate_simulated']}, "
          f"spearman {section['spearman']} -> {args.out / 'agreement.json'}")
    return 0


def _can_record(command: str) -> bool:
    """The comparison recording is optional: without rerun-sdk the evaluation goes on and
    one line says why no recording was written."""
    from k4d_eval.comparison_recording import unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"k4d {command}: comparison recording skipped: {reason}")
    return reason is None


def _check_workers(workers: int) -> None:
    if workers < 1:
        raise InvalidArgument.for_field("workers", f"must be >= 1, got {workers}")


def _print_headline(report: dict, out: Path) -> None:
    m = report["metrics"]

    def f(key, fmt):
        return "n/a" if m.get(key) is None else format(m[key], fmt)

    print(f"PSNR {f('psnr', '.2f')} SSIM {f('ssim', '.4f')} CD-L1 {f('chamfer_l1', '.4f')} m "
          f"CD-L2 {f('chamfer_l2', '.5f')} F@{report['settings']['tau']} {f('fscore', '.4f')} "
          f"({report['counts']['episodes']} episode(s)) -> {out / 'report.json'}")
