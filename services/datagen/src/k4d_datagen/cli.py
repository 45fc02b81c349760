"""`k4d datagen`: synthetic | import-lerobot | export | stats (docs/data.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from k4d.errors import InvalidArgument

MAX_SIDE = 4096
MAX_FRAMES = 1000


def register(subparsers) -> None:
    p = subparsers.add_parser("datagen", help="data engine: synthetic episodes, LeRobot imports, exports",
                              description="Generate, import, export and summarise 4D robot episode datasets "
                                          "(docs/data.md).")
    sub = p.add_subparsers(dest="datagen_command", metavar="ACTION", parser_class=type(p))
    sub.required = True

    s = sub.add_parser("synthetic", help="generate synthetic MuJoCo episodes")
    s.add_argument("--episodes", type=int, required=True, help="number of episodes (indices 0..N-1)")
    s.add_argument("--seed", type=int, required=True, help="dataset seed; episode i depends on (seed, i) only")
    s.add_argument("--out", required=True, help="dataset URI: a path, file:///path or s3://bucket/prefix")
    s.add_argument("--task", default="mix", help="pick | push | stack | mix (default mix)")
    s.add_argument("--failures", type=float, default=0.0,
                   help="fraction of episodes made to fail: Gaussian 6-DoF end-effector noise or near misses")
    s.add_argument("--frames", type=int, default=49, help="frames per clip (default 49)")
    s.add_argument("--height", type=int, default=480, help="image height (default 480)")
    s.add_argument("--width", type=int, default=720, help="image width (default 720)")
    s.add_argument("--workers", type=int, default=1, help="parallel processes (default 1)")
    s.add_argument("--robot", default="panda", help="builtin robot (default panda; the scripts drive a Panda)")
    s.add_argument("--framing", default="wide", help="camera framing: wide (the whole robot and table, "
                   "the default) | workspace (the table's task region fills the view: objects >= 12 px "
                   "across at 96x144)")
    s.add_argument("--scene-shift", default="", metavar="objects=S,camera=D",
                   help="a shifted scene distribution: object sizes times S, camera distance times D "
                        "(each in [0.5, 2]; default 1, the training distribution)")
    s.add_argument("--shard-index", type=int, default=None, help="generate only indices i with i %% shard-count == this")
    s.add_argument("--shard-count", type=int, default=None, help="number of shards (Kubernetes Indexed Job)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(handler=_synthetic)

    i = sub.add_parser("import-lerobot", help="import a LeRobot v3.0 dataset with exact robot masks")
    i.add_argument("path", help="LeRobot dataset root (meta/info.json, data/, videos/)")
    i.add_argument("--robot", required=True, help="builtin robot name or URDF path")
    i.add_argument("--camera", required=True, help="camera JSON (DESIGN.md form) or {default, episodes: {i: cam}}")
    i.add_argument("--out", required=True, help="dataset URI")
    i.add_argument("--episodes", default="", help="episode indices, e.g. 0,3,5 (default: all)")
    i.add_argument("--frames", type=int, default=49, help="clip length after uniform resampling (default 49)")
    i.add_argument("--video-key", default=None, help="camera video feature (default: the first)")
    i.add_argument("--state-key", default="observation.state", help="state feature (default observation.state)")
    i.add_argument("--state-kind", default="joints", choices=("joints", "ee_pose"),
                   help="joints (default) or ee_pose: end-effector poses, joints from our IK")
    i.add_argument("--state-map", default=None,
                   help="COLUMN=TARGET[*SCALE][+OFFSET],... or a JSON file: which state columns are which joints "
                        "(or x y z, rx ry rz | qx qy qz qw | roll pitch yaw with ee_pose); default: by the "
                        "feature's names (docs/data.md)")
    i.add_argument("--no-progress", action="store_true", help="no progress bar")
    i.set_defaults(handler=_import_lerobot)

    e = sub.add_parser("export", help="export an episode (npz | simulate-inputs | robo4d | rerun) or a dataset "
                                      "(lerobot)")
    e.add_argument("episode", help="DATASET_URI#EPISODE_ID, e.g. /data/synth#ep000003; lerobot also takes a "
                                   "whole DATASET_URI")
    e.add_argument("--format", required=True, choices=("npz", "simulate-inputs", "robo4d", "rerun", "lerobot"))
    e.add_argument("out", help="OUT.npz | a directory for simulate-inputs | the Robo4D layout root | OUT.rrd | "
                               "a new LeRobot dataset root")
    e.add_argument("--video-key", default=None,
                   help="lerobot: the RGB video key, observation.images.CAMERA or CAMERA (default: the key an "
                        "import came from, else observation.images.front)")
    e.add_argument("--extras", default="", help="lerobot: more video keys, robot_mask and/or depth (comma-separated)")
    e.add_argument("--fps", type=float, default=None, help="lerobot: resample every episode to this rate "
                                                          "(needed when their rates differ)")
    e.add_argument("--no-progress", action="store_true", help="lerobot: no progress bar")
    e.set_defaults(handler=_export)

    t = sub.add_parser("stats", help="counts, tasks, success rate and sizes of a dataset")
    t.add_argument("uri", help="dataset URI")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(handler=_stats)


def _positive(name: str, value: int, upper: int | None = None) -> int:
    if value < 1 or (upper is not None and value > upper):
        raise InvalidArgument.for_field(name, f"must be between 1 and {upper}, got {value}" if upper
                                        else f"must be >= 1, got {value}")
    return value


def _synthetic(args: argparse.Namespace) -> int:
    from k4d_tabletop.scene import FRAMINGS, SceneShift
    from k4d_tabletop.tasks import check_task

    from k4d_datagen.engine import EpisodeConfig
    from k4d_datagen.runner import generate_dataset, shard_indices

    # 1. check every input before anything is written
    _positive("--episodes", args.episodes)
    if args.seed < 0:
        raise InvalidArgument.for_field("--seed", f"must be >= 0, got {args.seed}")
    check_task(args.task)
    if not (math.isfinite(args.failures) and 0.0 <= args.failures <= 1.0):
        raise InvalidArgument.for_field("--failures", f"must be a fraction in [0, 1], got {args.failures}")
    _positive("--frames", args.frames, MAX_FRAMES)
    for name in ("height", "width"):
        if not 16 <= getattr(args, name) <= MAX_SIDE:
            raise InvalidArgument.for_field(f"--{name}", f"must be between 16 and {MAX_SIDE}, got {getattr(args, name)}")
    _positive("--workers", args.workers, 64)
    if args.robot != "panda":
        raise InvalidArgument.for_field("--robot", f"the scripted tasks drive a Panda; got {args.robot!r}")
    if args.framing not in FRAMINGS:
        raise InvalidArgument.for_field("--framing", f"must be one of {list(FRAMINGS)}, got {args.framing!r}")
    shift = SceneShift.parse(args.scene_shift)
    if (args.shard_index is None) != (args.shard_count is None):
        raise InvalidArgument.for_field("--shard-index", "give --shard-index and --shard-count together")
    if args.shard_count is not None:
        _positive("--shard-count", args.shard_count)
        if not 0 <= args.shard_index < args.shard_count:
            raise InvalidArgument.for_field("--shard-index", f"must be in [0, {args.shard_count}), got {args.shard_index}")
    template = EpisodeConfig(index=0, seed=args.seed, task=args.task, failures=args.failures,
                             frames=args.frames, height=args.height, width=args.width, robot=args.robot,
                             framing=args.framing, scene_shift=shift)
    # 2. generate
    summary = generate_dataset(args.out, template, shard_indices(args.episodes, args.shard_index, args.shard_count),
                               workers=args.workers, progress=not args.no_progress)
    print(f"{summary.uri}: {len(summary.generated)} episodes written ({summary.successes} successes), "
          f"{len(summary.skipped)} already complete")
    return 0


def _parse_episodes(text: str) -> list[int] | None:
    if not text.strip():
        return None
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise InvalidArgument.for_field("--episodes", f"expected indices like 0,3,5, got {text!r}") from None
    if any(v < 0 for v in values):
        raise InvalidArgument.for_field("--episodes", "indices must be >= 0")
    return values


def _import_lerobot(args: argparse.Namespace) -> int:
    from k4d_datagen.lerobot import import_lerobot

    _positive("--frames", args.frames, MAX_FRAMES)
    def refused(index: int, line: str) -> None:
        sys.stderr.write(f"k4d datagen: {line}\n")

    result = import_lerobot(args.path, robot_name=args.robot, camera_path=args.camera, out_uri=args.out,
                            episodes=_parse_episodes(args.episodes), frames=args.frames,
                            video_key=args.video_key, state_key=args.state_key, state_map=args.state_map,
                            state_kind=args.state_kind, progress=not args.no_progress, on_refused=refused)
    print(f"{args.out}: {len(result.written)} episodes imported"
          + (f", {len(result.refused)} refused" if result.refused else ""))
    # Refused episodes leave a partial import: a non-zero status that is not "bad input" (2).
    return 1 if result.refused else 0


def _export(args: argparse.Namespace) -> int:
    from k4d_datagen.export import export

    extras = [x for x in args.extras.replace(" ", "").split(",") if x]
    options = {"video_key": args.video_key, "extras": extras, "fps": args.fps}
    if args.format == "lerobot":
        options["progress"] = not args.no_progress
    path = export(args.episode, args.format, args.out, **options)
    print(path)
    return 0


def _stats(args: argparse.Namespace) -> int:
    from k4d_datagen.stats import dataset_stats

    stats = dataset_stats(args.uri)
    if args.json:
        json.dump(stats, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    rate = stats["success_rate"]
    print(f"{stats['uri']}: {stats['episodes']} episodes, {stats['frames']} frames, "
          f"success rate {'n/a' if rate is None else f'{rate:.2f}'} over {stats['labelled']} labelled")
    for kind, row in stats["task_kinds"].items():
        r = row["success_rate"]
        print(f"  {kind:8s} {row['episodes']:6d} episodes, success {'n/a' if r is None else f'{r:.2f}'}")
    more = stats["distinct_tasks"] - len(stats["tasks"])
    print(f"  tasks ({stats['distinct_tasks']}{', most frequent first' if more else ''}):")
    for task, n in stats["tasks"].items():
        print(f"    {n:6d}  {task or '(no task text)'}")
    if more:
        print(f"    ... and {more} more (--json lists the first {len(stats['tasks'])})")
    print("  sources: " + ", ".join(f"{k} {n}" for k, n in stats["sources"].items()))
    print("  robots: " + ", ".join(f"{k} {n}" for k, n in stats["robots"].items()))
    for res, n in stats["resolutions"].items():
        print(f"  clips {res}: {n}")
    if "bytes_total" in stats:
        print(f"  {stats['bytes_total'] / 2**20:.1f} MiB stored, {stats['bytes_per_episode_mean'] / 2**20:.2f} MiB per episode")
    return 0
