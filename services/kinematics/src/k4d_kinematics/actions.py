"""Moved to `k4d.actions` (the runtime: the actions document is read by kinematics, the
embedded runner and the data engine, issue 9 point 11). This name is the same module
object, kept for the kinematics package's callers."""

import sys

from k4d import actions as _moved

sys.modules[__name__] = _moved
