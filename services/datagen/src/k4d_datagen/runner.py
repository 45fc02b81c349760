"""`k4d datagen synthetic`: generate episode indices into a dataset, resumable and in
parallel processes.

Workers (spawned processes, each with its own MuJoCo/OSMesa context) generate an episode
and write its zarr group; the parent lists each finished episode in the dataset's index,
so a crash anywhere leaves only complete episodes listed and a rerun skips them. Shards
of an Indexed Job write one dataset at once: each lists only its own episodes. Episode
`ep{index:06d}` depends only on (seed, index), so the same command writes the same bytes
whatever the worker count or the shard layout.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from dataclasses import dataclass, replace

from k4d.episodes import DatasetWriter, EpisodeMeta

from k4d_datagen.engine import EpisodeConfig, generate_episode

# A commit writes one small index entry per episode, whatever the dataset's size
# (k4d.episodes), so every episode is listed as soon as it is done.
COMMIT_EVERY_EPISODES = 1
COMMIT_EVERY_S = 60.0


@dataclass
class RunSummary:
    uri: str
    generated: list[str]
    skipped: list[str]
    successes: int


def _generate_and_write(uri: str, config: EpisodeConfig) -> EpisodeMeta:
    meta, arrays = generate_episode(config)
    return DatasetWriter(uri).write_episode(meta, arrays, commit=False)


def shard_indices(episodes: int, shard_index: int | None, shard_count: int | None) -> list[int]:
    """Indices 0..episodes-1, or every shard_count-th starting at shard_index."""
    if shard_index is None:
        return list(range(episodes))
    return list(range(shard_index, episodes, shard_count))


def generate_dataset(uri: str, template: EpisodeConfig, indices: list[int], *, workers: int = 1,
                     progress: bool = True, config=None) -> RunSummary:
    """Generate `indices` (episode index -> EpisodeConfig from `template`) into `uri`."""
    from tqdm import tqdm

    writer = DatasetWriter(uri, config=config)
    configs = [replace(template, index=i) for i in indices]
    todo = [c for c in configs if not writer.has_episode(c.episode_id)]
    skipped = [c.episode_id for c in configs if writer.has_episode(c.episode_id)]
    summary = RunSummary(writer.uri, [], skipped, 0)
    bar = tqdm(total=len(configs), initial=len(skipped), desc="episodes", unit="ep",
               disable=not progress, dynamic_ncols=True)

    pending: list[EpisodeMeta] = []
    last_commit = time.monotonic()

    def flush() -> None:
        nonlocal last_commit
        if pending:
            writer.commit(pending)
            summary.generated.extend(m.episode_id for m in pending)
            summary.successes += sum(bool(m.success) for m in pending)
            pending.clear()
        last_commit = time.monotonic()

    def done(meta: EpisodeMeta) -> None:
        pending.append(meta)
        if len(pending) >= COMMIT_EVERY_EPISODES or time.monotonic() - last_commit >= COMMIT_EVERY_S:
            flush()
        bar.update(1)

    try:
        if workers <= 1:
            for c in todo:
                meta, arrays = generate_episode(c)
                done(writer.write_episode(meta, arrays, commit=False))
        else:
            ctx = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futures = [pool.submit(_generate_and_write, writer.uri, c) for c in todo]
                try:
                    for future in cf.as_completed(futures):
                        done(future.result())
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
    finally:
        flush()  # list what is complete, also when another episode failed
        bar.close()
    if summary.generated:
        writer.compact()  # readers then get every EpisodeMeta in one request
    return summary
