"""`k4d policy serve NAME --port P` and `k4d policy-eval ...` (docs/policy.md)."""

from __future__ import annotations

import argparse
import math
import sys

from k4d.errors import InvalidArgument

MAX_SCENES = 100_000


def register(subparsers) -> None:
    p = subparsers.add_parser("policy", help="serve a built-in policy over gRPC (PolicyService)",
                              description="Built-in reference policies behind PolicyService (docs/policy.md).")
    sub = p.add_subparsers(dest="policy_command", metavar="ACTION", parser_class=type(p))
    sub.required = True
    s = sub.add_parser("serve", help="serve one built-in policy until SIGTERM")
    s.add_argument("name", help="built-in policy (k4d policy-eval --list-policies)")
    s.add_argument("--port", type=int, default=0, help="gRPC port (0 = any free port, printed at start)")
    s.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; 0.0.0.0 = every interface)")
    s.set_defaults(handler=_serve)
    s = sub.add_parser("list", help="the built-in policies with what sets their grade")
    s.set_defaults(handler=_list_described)

    e = subparsers.add_parser(
        "policy-eval", help="evaluate policies in the world model and in MuJoCo physics",
        description="Run every (policy, task, scene) closed-loop in the world model and in MuJoCo physics, "
                    "judge success in each, and report their agreement (report.json, summary.md).")
    e.add_argument("--list-policies", action="store_true", help="print the built-in policies, one per line")
    e.add_argument("--policies", default="", help="built-in names and/or grpc://HOST:PORT, comma-separated "
                                                  "(default: every built-in policy)")
    e.add_argument("--tasks", default="pick,push,stack", help="comma-separated from pick, push, stack")
    e.add_argument("--scenes", type=int, help="scenes per task (indices 0..N-1)")
    e.add_argument("--seed", type=int, help="scene seed; use seeds the model was not trained on (e.g. 7000)")
    e.add_argument("--framing", default="wide",
                   help="the scenes' camera: wide (the whole robot and table, the default) or workspace "
                        "(the table region the tasks use; models/demo-small is trained on it)")
    e.add_argument("--model", default="", help="world model (default: the default model of k4d simulate)")
    e.add_argument("--mode", default="closed", choices=("closed", "open"),
                   help="closed: the policy acts every --chunk frames; open: once, from the first frame")
    e.add_argument("--chunk", type=int, default=6, help="frames per action chunk in closed mode (default 6)")
    e.add_argument("--workers", type=int, default=1, help="parallel processes, each loading the model once")
    e.add_argument("--out", help="output folder or s3://bucket/prefix")
    e.add_argument("--timeout", type=float, default=30.0, help="seconds per policy call (gRPC deadline)")
    e.add_argument("--shard-index", type=int, default=None, help="run only scenes i with i %% shard-count == this")
    e.add_argument("--shard-count", type=int, default=None, help="number of shards (Kubernetes Indexed Job)")
    e.add_argument("--report-only", action="store_true", help="write the report from the recorded episodes")
    e.add_argument("--no-recordings", action="store_true", help="no Rerun recordings in summary.md")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(handler=_policy_eval)


def _serve(args: argparse.Namespace) -> int:
    from k4d.config import load_config
    from k4d.grpc_server import serve

    from k4d_policy.server import policy_register_fn

    if not 0 <= args.port <= 65535:
        raise InvalidArgument.for_field("--port", f"must be in [0, 65535], got {args.port}")
    register = policy_register_fn(args.name)
    port = args.port or _free_port(args.host)
    config = load_config(grpc_port=port, grpc_host=args.host, metrics_port=0,
                         service_name=f"policy-{args.name}")
    print(f"serving policy {args.name!r} (kinema4d.v1.PolicyService) on {args.host}:{port}", flush=True)
    return serve(config, [register])


def _free_port(host: str) -> int:
    """A port free now, so that the one printed is the one served (--port 0)."""
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _list_described(args: argparse.Namespace) -> int:
    from k4d_policy.policies import BUILTIN_POLICIES

    for name, (_, description) in BUILTIN_POLICIES.items():
        print(f"{name}\t{description}")
    return 0


def parse_policies(text: str) -> list[str]:
    from k4d_policy.policies import builtin_names
    from k4d_policy.remote import GRPC_PREFIX

    names = [p.strip() for p in text.split(",") if p.strip()] if text else builtin_names()
    for name in names:
        if name.startswith(GRPC_PREFIX):
            host, _, port = name[len(GRPC_PREFIX):].rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise InvalidArgument.for_field("--policies", f"{name!r}: expected grpc://HOST:PORT")
        elif name not in builtin_names():
            raise InvalidArgument.for_field("--policies", f"unknown policy {name!r}; built-in: "
                                                          f"{', '.join(builtin_names())} (or grpc://HOST:PORT)")
    if len(set(names)) != len(names):
        raise InvalidArgument.for_field("--policies", "a policy is named twice")
    return names


def _config(args: argparse.Namespace):
    from k4d_tabletop.scene import FRAMINGS
    from k4d_tabletop.tasks import TASKS

    from k4d_policy.evaluate import EvalConfig

    if args.scenes is None or args.seed is None or not args.out:
        raise InvalidArgument.for_field("--scenes" if args.scenes is None else "--seed" if args.seed is None
                                        else "--out", "required (with --scenes N --seed S --out DIR)")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASKS]
    if not tasks or bad:
        raise InvalidArgument.for_field("--tasks", f"unknown task(s) {bad}; choose from {list(TASKS)}")
    if args.framing not in FRAMINGS:
        raise InvalidArgument.for_field("--framing", f"must be one of {list(FRAMINGS)}, got {args.framing!r}")
    if not 1 <= args.scenes <= MAX_SCENES:
        raise InvalidArgument.for_field("--scenes", f"must be in [1, {MAX_SCENES}], got {args.scenes}")
    if args.workers < 1:
        raise InvalidArgument.for_field("--workers", f"must be >= 1, got {args.workers}")
    if args.chunk < 1:
        raise InvalidArgument.for_field("--chunk", f"must be >= 1, got {args.chunk}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise InvalidArgument.for_field("--timeout", f"must be a finite number > 0, got {args.timeout}")
    if (args.shard_index is None) != (args.shard_count is None):
        raise InvalidArgument.for_field("--shard-index", "give --shard-index and --shard-count together")
    if args.shard_count is not None and not 0 <= args.shard_index < args.shard_count:
        raise InvalidArgument.for_field("--shard-index", f"must be in [0, {args.shard_count}), got {args.shard_index}")
    return EvalConfig(policies=parse_policies(args.policies), tasks=tasks, scenes=args.scenes, seed=args.seed,
                      out=args.out, model=args.model, mode=args.mode, chunk=args.chunk, workers=args.workers,
                      progress=not args.no_progress, timeout_s=args.timeout, shard_index=args.shard_index,
                      shard_count=args.shard_count, framing=args.framing)


def _policy_eval(args: argparse.Namespace) -> int:
    if args.list_policies:
        from k4d_policy.policies import builtin_names

        print("\n".join(builtin_names()))
        return 0
    from k4d_policy.evaluate import evaluate, plan_clip
    from k4d_policy.report import write_report

    cfg = _config(args)
    cfg = plan_clip(cfg)
    if args.chunk > cfg.horizon:
        raise InvalidArgument.for_field("--chunk", f"must be <= the horizon ({cfg.horizon} frames), got {args.chunk}")
    if not args.report_only:
        ran = evaluate(cfg)
        print(f"episodes: {ran['ran']} run, {ran['skipped']} already recorded ({ran['seconds']} s)", file=sys.stderr)
    if args.shard_index is not None and not args.report_only:
        return 0  # one pod of many: the report comes from a --report-only run over all shards
    report = write_report(cfg, recordings=not args.no_recordings)
    c = report["correlation"]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"pearson {fmt(c['pearson'])}  spearman {fmt(c['spearman'])}  mmrv {fmt(c['mmrv'])}  "
          f"episode agreement {fmt(report['episode_agreement'])}  -> {cfg.out}/report.json")
    return 0
