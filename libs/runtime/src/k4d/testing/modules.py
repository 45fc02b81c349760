"""Import a repository script (e.g. infra/tools/*.py, not an installed package) in tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_path_module(path: str | Path, name: str) -> ModuleType:
    """The module at `path`, imported once per process under `name`."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
