"""Test-wide settings: hypothesis profiles (derandomised on CI so a run is reproducible), and `one_torch_thread`
for tests that train (the suite runs two xdist workers on two cores, and two OpenMP threads per worker spin against
each other — training ran ~5x slower that way on a busy machine)."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def one_torch_thread():
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
