"""The embedded runner: `k4d simulate` runs the kinematics, projection and generation stages
in one process, with a local directory as object store, through each service's public API."""

# The public API: nothing. No other package imports this one; the platform reaches it through
# its entry point (pyproject.toml) only (tests/contract/test_service_imports.py).
__all__: list[str] = []
