"""Kinema4D trainer: recipes, data, torchrun DDP/FSDP2 training, checkpoints, publishing.

Importing the package is cheap; torch and the model libraries load in the modules that
need them. The run-directory protocol the control plane reads is `k4d_trainer.runs`.
"""

__version__ = "0.1.0"
