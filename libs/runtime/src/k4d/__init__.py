"""Kinema4D platform runtime.

Importing this package is cheap: no torch, no network, no side effects.
"""

__version__ = "0.1.0"
