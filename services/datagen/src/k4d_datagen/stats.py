"""`k4d datagen stats`: what a dataset holds (from its manifest; sizes from the store)."""

from __future__ import annotations

from collections import Counter

from k4d.episodes import open_dataset

MAX_TASKS = 20  # task texts listed, most frequent first


def dataset_stats(uri: str, config=None, sizes: bool = True) -> dict:
    ds = open_dataset(uri, config=config)
    metas = [ds.meta(e) for e in ds.episode_ids]
    labelled = [m for m in metas if m.success is not None]
    by_kind: dict[str, dict] = {}
    for kind in sorted({m.task_kind for m in metas}):
        group = [m for m in metas if m.task_kind == kind and m.success is not None]
        by_kind[kind] = {"episodes": sum(m.task_kind == kind for m in metas),
                         "success_rate": (sum(m.success for m in group) / len(group)) if group else None}
    stats = {
        "uri": ds.uri, "episodes": len(metas), "frames": sum(m.frames for m in metas),
        "task_kinds": by_kind, "tasks": dict(Counter(m.task for m in metas).most_common(MAX_TASKS)),
        "distinct_tasks": len({m.task for m in metas}),
        "success_rate": (sum(m.success for m in labelled) / len(labelled)) if labelled else None,
        "labelled": len(labelled),
        "sources": dict(Counter(m.source.get("kind", "?") for m in metas)),
        "resolutions": dict(Counter(f"{m.frames}x{m.height}x{m.width}" for m in metas)),
        "robots": dict(Counter(m.robot for m in metas)),
    }
    if sizes and metas:
        per_episode = [ds.size_bytes(m.episode_id) for m in metas]
        stats["bytes_total"] = sum(per_episode)
        stats["bytes_per_episode_mean"] = sum(per_episode) / len(per_episode)
    return stats
