"""Moved to the shared model library: `k4d_model.checkpoints`. This name is the same module object,
so existing imports, private names and monkeypatching keep working."""

import sys

from k4d_model import checkpoints as _moved

sys.modules[__name__] = _moved
