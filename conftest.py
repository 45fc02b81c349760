pytest_plugins = ["k4d.testing.pytest_plugin"]
