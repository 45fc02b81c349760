"""Kinema4D simulator front door: submit, get, watch, cancel and list simulation jobs, and
the job records it folds from the bus (runtime dependencies only: no torch, no open3d)."""

from __future__ import annotations

# The public API: what other packages (the embedded runner) may import, always as
# `from k4d_simulator import NAME` (tests/contract/test_service_imports.py). The rest of
# the package is internal.
from k4d_simulator.jobs import is_terminal
from k4d_simulator.outcomes import STATIC_WORLD_WARNING, stage_outcomes, warnings_of
from k4d_simulator.validation import DEFAULT_NUM_FRAMES, validate_spec

__all__ = ["DEFAULT_NUM_FRAMES", "STATIC_WORLD_WARNING", "is_terminal", "stage_outcomes",
           "validate_spec", "warnings_of"]
