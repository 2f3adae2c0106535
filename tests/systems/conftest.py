"""Fixtures of the physics tests."""

from __future__ import annotations

import pytest
import warp as wp


@pytest.fixture
def cpu_blocks():
    """Warp's cooperative CPU blocks, so that a block's lanes run side by side on CPU too."""
    before = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = True
    yield
    wp.config.enable_cpu_blocks = before
