"""Kinema4D kinematics: robot registry, full-tree forward kinematics, inverse
kinematics and action -> joint-trajectory conversion (pure numpy cores)."""

from __future__ import annotations

# The public API: what other packages (the composers: the embedded runner, datagen, policy
# evaluation) may import, always as `from k4d_kinematics import NAME` (tests/contract/
# test_service_imports.py). The rest of the package is internal.
from k4d_kinematics.core import KinematicsOutput, run_kinematics
from k4d_kinematics.ik import IKOptions, solve_ik

__all__ = ["IKOptions", "KinematicsOutput", "run_kinematics", "solve_ik"]
