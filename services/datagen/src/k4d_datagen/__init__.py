"""k4d-datagen: the data engine. Synthetic 4D robot episodes on MuJoCo, imports of LeRobot
datasets with exact kinematic robot masks, and exports (NPZ, `k4d simulate` inputs,
Robo4D-200k layout). Episodes are written in the shared format of `k4d.episodes`."""

# The public API: nothing. No other package imports this one; the platform reaches it through
# its entry points (pyproject.toml) only (tests/contract/test_service_imports.py).
__all__ = ["__version__"]
__version__ = "0.1.0"
GENERATOR = f"k4d-datagen {__version__}"
