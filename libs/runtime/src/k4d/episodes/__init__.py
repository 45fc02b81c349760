"""The shared episode format: 4D robot episodes as zarr v3 groups plus a manifest.

Layout of a dataset root (a local path, `file:///path` or `s3://bucket/prefix`):

    <root>/manifest.json              lists ONLY complete episodes (rewritten atomically, last)
    <root>/manifest.d/<shard>.json    the same, written by one shard of a parallel job
    <root>/episodes/<episode_id>/     one zarr v3 group per episode (arrays + attrs)

Arrays and metadata are documented in docs/data.md (a public surface). zarr and s3fs
are the optional extra `k4d-runtime[data]`; they are imported only when a dataset is
opened, so `import k4d` stays light.
"""

from k4d.episodes.meta import EpisodeMeta
from k4d.episodes.schema import ARRAY_SPECS, OPTIONAL_ARRAYS, REQUIRED_ARRAYS, SCHEMA_VERSION

__all__ = ["ARRAY_SPECS", "OPTIONAL_ARRAYS", "REQUIRED_ARRAYS", "SCHEMA_VERSION", "Dataset",
           "DatasetWriter", "Episode", "EpisodeMeta", "open_dataset"]


def __getattr__(name: str):
    # The dataset classes import zarr lazily through k4d.episodes.dataset.
    if name in ("Dataset", "DatasetWriter", "Episode", "open_dataset"):
        from k4d.episodes import dataset

        return getattr(dataset, name)
    raise AttributeError(name)
