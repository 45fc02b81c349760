"""Rerun recordings (`.rrd`) of rollouts, episodes and evaluations: the 4D output people open
in the Rerun viewer (`k4d view`, `rerun FILE.rrd`).

One writer for every producer: `k4d simulate` and `k4d generate` (rollout.rrd),
`k4d datagen export --format rerun` (an episode) and `k4d eval` (ground truth beside the
prediction, with the per-frame metrics). docs/viewing.md lists the entity paths.

rerun-sdk is the optional extra `k4d-runtime[viz]`; it is imported only when a recording is
written or read, so `import k4d.recording` stays light and a missing install fails at the
point of use with an error that says what to install.
"""

from k4d.recording.actions import actions_per_frame
from k4d.recording.episodes import record_episode
from k4d.recording.layout import APPLICATION_ID, RECORDING_FILE, is_rerun_available, require_rerun
from k4d.recording.reader import RecordingIndex, read_recording_index
from k4d.recording.writer import LinkMesh, write_comparison_recording, write_episode_recording

__all__ = ["APPLICATION_ID", "RECORDING_FILE", "LinkMesh", "RecordingIndex", "actions_per_frame",
           "is_rerun_available", "read_recording_index", "record_episode", "require_rerun",
           "write_comparison_recording", "write_episode_recording"]
