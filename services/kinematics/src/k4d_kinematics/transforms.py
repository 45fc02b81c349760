"""Moved to `k4d.rotations` (the runtime: robot descriptions are shared by kinematics,
projection and the data engine, issue 9 point 11). This name is the same module object,
kept for the kinematics package's callers."""

import sys

from k4d import rotations as _moved

sys.modules[__name__] = _moved
