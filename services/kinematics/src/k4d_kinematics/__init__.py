"""Kinema4D kinematics: robot registry, full-tree forward kinematics, inverse
kinematics and action -> joint-trajectory conversion (pure numpy cores)."""
