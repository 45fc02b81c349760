"""k4d-policy: policy evaluation in the world model, checked against MuJoCo physics.
PolicyService (gRPC), built-in reference policies, closed-loop worlds, `k4d policy-eval`
and a Gymnasium environment (`k4d_policy.envs`). docs/policy.md."""

# The public API: nothing. No other package imports this one; the platform reaches it through
# its entry points (pyproject.toml) only (tests/contract/test_service_imports.py).
__all__ = ["__version__"]
__version__ = "0.1.0"
