"""Kinema4D trainer: recipes, data, torchrun DDP/FSDP2 training, checkpoints, publishing.

Importing the package is cheap; torch and the model libraries load in the modules that
need them. The run-directory protocol the control plane reads is `k4d_trainer.runs`.
"""

# The public API: nothing. No other package imports this one; the platform reaches it through
# its entry points (pyproject.toml) only (tests/contract/test_service_imports.py).
__all__ = ["__version__"]
__version__ = "0.1.0"
