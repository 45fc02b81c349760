import os

pytest_plugins = ["k4d.testing.pytest_plugin"]

# Tests that run `k4d simulate` without --model were written for the static-world backend at
# any clip size; the shipped demo model (models/demo-small) samples only its own clip. Pin
# the floor for the test session (subprocesses inherit it); the shipped-model tests unset
# it where they test the default switch and `make demo` itself.
os.environ.setdefault("K4D_DEFAULT_MODEL", "static-world")
