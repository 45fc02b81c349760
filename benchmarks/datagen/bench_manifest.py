"""Commit time of one episode into a dataset of N complete episodes (issue 19, item 7).

Layout 2 (k4d.episodes today): a commit writes one small index entry,
meta/episodes/<episode_id>.json. Anchor measured in the same run: layout 1, which
rewrote manifest.json listing every EpisodeMeta on each commit (what the earlier
DatasetWriter.commit did: json.dumps of all metas, one atomic replace or PUT).

The datasets hold index entries only, no zarr groups: a commit never reads the groups,
and the figure is the listing cost alone. Each EpisodeMeta is a datagen-sized one (49
frames, 9 joints, per-frame joint targets). Also reported: opening the dataset and
reading every EpisodeMeta (`Dataset.counts()`), the read side of the same change, before
and after `DatasetWriter.compact()` (the snapshot a datagen run writes once at its end).

    .venv/bin/python benchmarks/datagen/bench_manifest.py [--sizes 10,1000,10000]
        [--repeats 20] [--s3] [--json out.json]

--s3 runs the same on a local S3 server (moto, `pip install 'moto[server]'`) as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import tempfile
import time

import numpy as np
from k4d.episodes import DatasetWriter, EpisodeMeta, open_dataset
from k4d.episodes.location import open_location

T, J = 49, 9


def datagen_meta(episode_id: str) -> EpisodeMeta:
    rng = np.random.default_rng(0)
    return EpisodeMeta(
        episode_id=episode_id, frames=T, height=480, width=720, fps=10.0, task="push the red cube",
        task_kind="push", success=True, success_judge="object displacement > 5 cm", robot="panda",
        joint_names=[f"panda_joint{i}" for i in range(1, 8)] + ["finger1", "finger2"],
        actions={"type": "joint_positions", "values": rng.normal(size=(T, J)).round(6).tolist()},
        camera={"width": 720, "height": 480, "fx": 600.0, "fy": 600.0, "cx": 359.5, "cy": 239.5,
                "T_cam_from_world": np.eye(4).tolist()},
        object_names=["cube"], source={"kind": "synthetic", "seed": 7}, arrays=["rgb", "joints"])


def layout1_commit(loc, metas: dict[str, dict]) -> None:
    """The earlier commit: every EpisodeMeta, rewritten in one object."""
    doc = {"format": "k4d.episodes", "schema_version": 1, "episodes": [metas[k] for k in sorted(metas)]}
    loc.write_atomic("manifest.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(root: str, n: int, repeats: int, config=None) -> dict:
    template = datagen_meta("x")
    # layout 2: fill with n entries, then time single-episode commits
    writer = DatasetWriter(f"{root}/v2-{n}", config=config)
    fill_start = time.perf_counter()
    writer.commit([dataclasses.replace(template, episode_id=f"ep{i:06d}") for i in range(n)])
    fill_s = time.perf_counter() - fill_start
    v2 = [timed(lambda r=r: writer.commit([dataclasses.replace(template, episode_id=f"new{r:04d}")]))
          for r in range(repeats)]
    open_s = timed(lambda: open_dataset(writer.uri, config=config).counts())
    compact_s = timed(writer.compact)  # what `k4d datagen synthetic` does once, at the end
    compacted_open_s = timed(lambda: open_dataset(writer.uri, config=config).counts())
    # layout 1 anchor: the same metas, one manifest rewritten per commit
    loc = open_location(f"{root}/v1-{n}", config)
    if hasattr(loc, "ensure_bucket"):
        loc.ensure_bucket()
    metas = {f"ep{i:06d}": dataclasses.replace(template, episode_id=f"ep{i:06d}").to_dict() for i in range(n)}
    v1 = []
    for r in range(repeats):
        metas[f"new{r:04d}"] = dataclasses.replace(template, episode_id=f"new{r:04d}").to_dict()
        v1.append(timed(lambda: layout1_commit(loc, metas)))
    v1_open_s = timed(lambda: open_dataset(loc.uri, config=config).counts())
    manifest_bytes = len(loc.read_bytes("manifest.json"))
    entry_bytes = len(open_location(writer.uri, config).read_bytes("meta/episodes/new0000.json"))
    return {"episodes": n, "commit_ms_layout2": 1e3 * statistics.median(v2),
            "commit_ms_layout1": 1e3 * statistics.median(v1),
            "ratio_layout1_over_layout2": statistics.median(v1) / statistics.median(v2),
            "bytes_per_commit_layout2": entry_bytes, "bytes_per_commit_layout1": manifest_bytes,
            "open_and_count_s_layout2": open_s, "open_and_count_s_layout1": v1_open_s,
            "compact_s_layout2": compact_s, "open_and_count_s_layout2_compacted": compacted_open_s,
            "fill_s_layout2": fill_s}


def run(backend: str, sizes: list[int], repeats: int) -> list[dict]:
    if backend == "local":
        with tempfile.TemporaryDirectory() as tmp:
            return [measure(tmp, n, repeats) for n in sizes]
    from k4d import local_servers
    from k4d.config import load_config

    server = local_servers.start_s3_server()
    try:
        config = load_config(env={}, s3_endpoint=server.address, s3_access_key=local_servers.LOCAL_S3_ACCESS_KEY,
                             s3_secret_key=local_servers.LOCAL_S3_SECRET_KEY,
                             s3_region=local_servers.LOCAL_S3_REGION)
        return [measure("s3://k4d-bench-manifest/ds", n, repeats, config) for n in sizes]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--s3", action="store_true", help="also on a local S3 server (moto)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
               "repeats": args.repeats, "backends": {}}
    for backend in ["local"] + (["s3"] if args.s3 else []):
        rows = run(backend, sizes, args.repeats)
        results["backends"][backend] = rows
        print(f"{backend}: commit of one episode (median of {args.repeats}), layout 2 vs layout 1")
        for row in rows:
            print(f"  N={row['episodes']:>6}: {row['commit_ms_layout2']:8.2f} ms "
                  f"({row['bytes_per_commit_layout2']} B) vs {row['commit_ms_layout1']:9.2f} ms "
                  f"({row['bytes_per_commit_layout1']} B), x{row['ratio_layout1_over_layout2']:.1f}; "
                  f"open+counts {row['open_and_count_s_layout2']:.3f} s "
                  f"({row['open_and_count_s_layout2_compacted']:.3f} s after a {row['compact_s_layout2']:.2f} s "
                  f"compact) vs {row['open_and_count_s_layout1']:.3f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
