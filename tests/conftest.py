"""Shared fixtures; the synthetic data they hand out is made in tests/synthetic.py."""
from __future__ import annotations

import pytest

from hookmagic.trace.model import Trace
from tests.synthetic import synthetic_meta, synthetic_tables


@pytest.fixture
def synthetic_trace() -> Trace:
    """A small synthetic Trace with every table filled (see synthetic_tables for numbers)."""
    return Trace(synthetic_tables(), synthetic_meta())
