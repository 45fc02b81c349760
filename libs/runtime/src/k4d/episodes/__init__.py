"""The shared episode format: 4D robot episodes as zarr v3 groups, dataset-level info and
an append-only episode index (the shape of LeRobot v3's meta/).

Layout of a dataset root (a local path, `file:///path` or `s3://bucket/prefix`):

    <root>/meta/info.json                  format, layout, schema, fps, path templates (written once)
    <root>/meta/episodes/<episode_id>.json one entry per COMPLETE episode (its EpisodeMeta), written last
    <root>/meta/episodes.snapshot.json     optional: every entry at once, a cache for readers
    <root>/episodes/<episode_id>/          one zarr v3 group per episode (arrays + attrs)

Datasets of the earlier layout (manifest.json + manifest.d/) are read as they are and
migrated by the first writer that opens them (k4d.episodes.dataset).

Arrays and metadata are documented in docs/data.md (a public surface). zarr and s3fs
are the optional extra `k4d-runtime[data]`; they are imported only when a dataset is
opened, so `import k4d` stays light.
"""

from k4d.episodes.meta import EpisodeMeta
from k4d.episodes.schema import ARRAY_SPECS, OPTIONAL_ARRAYS, REQUIRED_ARRAYS, SCHEMA_VERSION

__all__ = ["ARRAY_SPECS", "OPTIONAL_ARRAYS", "REQUIRED_ARRAYS", "SCHEMA_VERSION", "Dataset",
           "DatasetInfo", "DatasetWriter", "Episode", "EpisodeMeta", "is_dataset", "open_dataset"]


def __getattr__(name: str):
    # The dataset classes import zarr lazily through k4d.episodes.dataset.
    if name in ("Dataset", "DatasetInfo", "DatasetWriter", "Episode", "is_dataset", "open_dataset"):
        from k4d.episodes import dataset

        return getattr(dataset, name)
    raise AttributeError(name)
