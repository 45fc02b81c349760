"""k4d-policy: policy evaluation in the world model, checked against MuJoCo physics.
PolicyService (gRPC), built-in reference policies, closed-loop worlds, `k4d policy-eval`
and a Gymnasium environment (`k4d_policy.envs`). docs/policy.md."""

__version__ = "0.1.0"
