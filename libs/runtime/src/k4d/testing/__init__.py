"""Test helpers: the pytest plugin with real-server fixtures (k4d.testing.pytest_plugin)."""
