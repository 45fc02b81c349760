"""Read a recording back with rerun's own chunk reader: which entities it holds and on which
frames (what the tests and `k4d view` check)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from k4d.recording import layout


@dataclass
class RecordingIndex:
    """frames: entity path -> sorted frame indices it has data on; static: entity paths with
    static (timeless) data; batches: entity path -> its chunks' record batches (pyarrow)."""

    frames: dict[str, list[int]] = field(default_factory=dict)
    static: set[str] = field(default_factory=set)
    batches: dict[str, list] = field(default_factory=dict)

    @property
    def entities(self) -> set[str]:
        return set(self.frames) | self.static


def read_recording_index(path: str | Path) -> RecordingIndex:
    layout.require_rerun()
    from rerun.chunk import RrdReader

    frames: dict[str, set[int]] = defaultdict(set)
    index = RecordingIndex()
    for chunk in RrdReader(str(path)).store().stream().to_chunks():
        entity = chunk.entity_path
        batch = chunk.to_record_batch()
        index.batches.setdefault(entity, []).append(batch)
        if chunk.is_static:
            index.static.add(entity)
        elif layout.FRAME_TIMELINE in batch.schema.names:
            frames[entity].update(batch.column(layout.FRAME_TIMELINE).to_pylist())
    index.frames = {k: sorted(v) for k, v in frames.items()}
    return index
