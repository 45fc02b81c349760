"""Test and benchmark support for the projection service, kept out of the service's
serving code: nothing under k4d_projection imports this package except its tests and
benchmarks/."""
