"""Fixtures: the tiny seeded models (2 layers, 2 heads, 5 x 32 x 48 clips) of both variants."""

from __future__ import annotations

import pytest
from k4d_model.testing import tiny_model_factory


@pytest.fixture(scope="session")
def make_tiny():
    """make_tiny(variant) -> (components, lora) deep copies: tests may mutate them."""
    return tiny_model_factory()
