"""Kinema4D evaluation: video and geometry metrics of generated rollouts against ground
truth, per region, with policy-evaluation agreement and reports people read (`k4d eval`).

Metrics are additive per-frame sufficient statistics (`k4d_eval.stats`); the video
(`k4d_eval.video_metrics`) and geometry (`k4d_eval.geometry`) cores are pure numpy/scipy.
"""

# The public API: nothing. No other package imports this one; the platform reaches it through
# its entry points (pyproject.toml) only (tests/contract/test_service_imports.py).
__all__ = ["__version__"]
__version__ = "0.1.0"
