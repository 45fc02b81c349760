"""Moved to the runtime library: `k4d.tabletop.scene` (issue 18: the policy evaluator runs
the same scenes). This name is the same module object, so imports, private names and
monkeypatching keep working."""

import sys

import k4d.tabletop.scene as _moved

sys.modules[__name__] = _moved
