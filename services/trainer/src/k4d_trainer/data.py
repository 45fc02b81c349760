"""Training data: episode sources, the latent-cache pass, and the deterministic sampler.

Sources: a `k4d.episodes` dataset (file:// or s3://, streamed) or the Robo4D-200k layout
through `k4d.episodes.robo4d`. Both give `episode_ids`, `meta(id)` and `open(id)`.

Order: each epoch is a permutation of the episodes seeded by (seed, epoch). A step takes
the next `global_batch_size` positions of that stream; data-parallel rank r of W takes its
contiguous slice of them. The position (epoch, offset) is independent of the world size,
so it is checkpointed once and an elastic restart on another world size continues where
the run stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from k4d.errors import InvalidArgument, NotFound

from k4d_trainer import uris
from k4d_trainer.clips import ClipSpec, check_adaptable
from k4d_trainer.config import DataSection
from k4d_trainer.latents import LatentCache, SampleEncoder, sample_clip


def open_source(section: DataSection, config=None):
    """The dataset named by `data.uri`; a missing dataset is NotFound naming it."""
    if not section.uri:
        raise InvalidArgument.for_field("data.uri", "no dataset given (set data.uri or pass "
                                                    "--data)")
    fmt = section.format
    if fmt == "auto":
        fmt = _detect_format(section.uri, config)
    if fmt == "robo4d":
        return Robo4DSource(section.uri)
    from k4d.episodes import open_dataset

    return open_dataset(section.uri, config=config)


def _detect_format(uri: str, config) -> str:
    from k4d.episodes import is_dataset

    if is_dataset(uri, config):
        return "episodes"
    fs, path = uris.filesystem(uri, config)
    if fs.exists(f"{path}/videos") or fs.exists(f"{path}/train_shuffled.txt"):
        return "robo4d"
    raise NotFound(f"data.uri: {uri} is neither a k4d episode dataset (meta/info.json) nor a "
                   "Robo4D-200k directory (videos/, train_shuffled.txt)")


@dataclass
class _Meta:
    episode_id: str
    frames: int
    height: int
    width: int
    arrays: list[str]


class _Robo4DEpisode:
    """A decoded Robo4D sample behind the episode interface `read_clip` uses. Without our
    metric metadata (official files) the pointmaps are the stored [-1, 1] codes, already
    normalised as the official loader does: `normalised` tells the encoder so."""

    def __init__(self, sample):
        codes = sample.robot_pointmap_u8.astype("float32") / 127.5 - 1.0
        self.normalised = sample.pointmap is None or sample.robot_pointmap is None
        mask = sample.robot_mask
        if self.normalised:
            scene = None if sample.pointmap_u8 is None else (
                sample.pointmap_u8.astype("float32") / 127.5 - 1.0)
            robot = codes * mask[..., None]
        else:
            scene, robot = sample.pointmap, sample.robot_pointmap
        self._arrays = {"rgb": sample.rgb, "robot_rgb": sample.robot_rgb, "robot_mask": mask,
                        "robot_pointmap": robot}
        if scene is not None:
            self._arrays["pointmap"] = scene
        t, h, w = mask.shape
        self.meta = _Meta(sample.name, t, h, w, sorted(self._arrays))

    def __getitem__(self, name: str):
        return self._arrays[name]


class Robo4DSource:
    """The Robo4D-200k layout (`k4d.episodes.robo4d`) as an episode source (local roots)."""

    def __init__(self, uri: str):
        from k4d.episodes.robo4d import read_robo4d

        path = uris.normalize(uri)
        if uris.is_remote(path):
            raise InvalidArgument.for_field("data.uri", "the Robo4D layout is read from a local "
                                                        "directory; use a k4d dataset for s3://")
        self.layout = read_robo4d(path[len("file://"):])
        self._last: _Robo4DEpisode | None = None

    @property
    def episode_ids(self) -> list[str]:
        return list(self.layout.names)

    def open(self, episode_id: str) -> _Robo4DEpisode:
        if self._last is None or self._last.meta.episode_id != episode_id:
            self._last = _Robo4DEpisode(self.layout.read(episode_id))
        return self._last

    def meta(self, episode_id: str) -> _Meta:
        return self.open(episode_id).meta


def select_episodes(dataset, section: DataSection, clip: ClipSpec) -> list[str]:
    """The episodes to train on, each checked against the clip (InvalidArgument naming the
    first one that cannot be adapted)."""
    ids = list(dataset.episode_ids)
    if section.max_episodes is not None:
        ids = ids[: section.max_episodes]
    if not ids:
        raise InvalidArgument.for_field("data.uri", f"{section.uri} has no complete episodes")
    for episode_id in ids:
        meta = dataset.meta(episode_id)
        check_adaptable(episode_id, meta.frames, meta.height, meta.width, clip,
                        section.max_upscale, list(meta.arrays))
    return ids


def encode_missing(dataset, episode_ids: list[str], encoder: SampleEncoder, cache: LatentCache,
                   clip: ClipSpec, rank: int, world_size: int,
                   progress: Callable[[int, int], None] | None = None) -> int:
    """Encode this rank's share (every world_size-th episode) that the cache lacks; returns
    how many were encoded. Re-running skips what is there, so the pass is resumable."""
    mine = episode_ids[rank::world_size]
    encoded = 0
    for i, episode_id in enumerate(mine):
        if not cache.has(episode_id):
            cache.save(episode_id, encoder.encode(sample_clip(dataset.open(episode_id), clip,
                                                              encoder.tracks)))
            encoded += 1
        if progress is not None:
            progress(i + 1, len(mine))
    return encoded


@dataclass
class DataPosition:
    """Where the sample stream stands: epoch and samples consumed within it (Stateful)."""

    epoch: int = 0
    offset: int = 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])


class EpisodeSampler:
    """Deterministic global batches; `next_batch()` -> [(global sample number, episode id)]
    for this rank."""

    def __init__(self, episode_ids: list[str], seed: int, global_batch_size: int, rank: int,
                 world_size: int):
        if global_batch_size % world_size:
            raise InvalidArgument.for_field(
                "training.global_batch_size", f"{global_batch_size} is not divisible by the "
                                              f"data-parallel world size {world_size}")
        self.episode_ids = list(episode_ids)
        self.seed, self.global_batch_size = seed, global_batch_size
        self.rank, self.world_size = rank, world_size
        self.position = DataPosition()
        self.samples_seen = 0  # global sample number of the next sample
        self._orders: dict[int, list[int]] = {}

    def order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._orders = {epoch: torch.randperm(len(self.episode_ids),
                                                  generator=generator).tolist()}
        return self._orders[epoch]

    def next_batch(self) -> list[tuple[int, str]]:
        batch = []
        for _ in range(self.global_batch_size):
            if self.position.offset >= len(self.episode_ids):
                self.position.epoch += 1
                self.position.offset = 0
            index = self.order(self.position.epoch)[self.position.offset]
            batch.append((self.samples_seen, self.episode_ids[index]))
            self.position.offset += 1
            self.samples_seen += 1
        local = self.global_batch_size // self.world_size
        return batch[self.rank * local: (self.rank + 1) * local]

    def state_dict(self) -> dict:
        return {**self.position.state_dict(), "samples_seen": self.samples_seen}

    def load_state_dict(self, state: dict) -> None:
        self.position.load_state_dict(state)
        self.samples_seen = int(state["samples_seen"])


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([s[key] for s in samples]) for key in samples[0]}
