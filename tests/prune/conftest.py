"""Pruning test fixtures: one torch thread per test (tests/conftest.py's `one_torch_thread`, for every test here)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield
