"""Moved to the shared model library: `k4d_model.model` (and its submodules). These names
are the same module objects, so `k4d_generator.model.configs` etc. keep working."""

import sys

import k4d_model.model as _moved
from k4d_model.model import attention, conditioning, configs, transformer

for _name, _module in (("attention", attention), ("conditioning", conditioning),
                       ("configs", configs), ("transformer", transformer)):
    sys.modules[f"{__name__}.{_name}"] = _module
sys.modules[__name__] = _moved
