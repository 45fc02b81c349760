"""Moved to `k4d.robots.validation` (the runtime: robot descriptions are shared by kinematics,
projection and the data engine, issue 9 point 11). This name is the same module object,
kept for the kinematics package's callers."""

import sys

from k4d.robots import validation as _moved

sys.modules[__name__] = _moved
