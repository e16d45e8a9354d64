"""Test-wide settings: hypothesis profiles (derandomised on CI so a run is reproducible), and `one_torch_thread`
for tests that train (the suite runs two xdist workers on two cores, and two OpenMP threads per worker spin against
each other — training ran ~5x slower that way on a busy machine)."""

import os

import pytest
from hypothesis import HealthCheck, settings

# Under xdist (the README's `-n 2`, one worker per core) every worker and the processes its tests start compute on
# one thread: two workers with two OpenMP threads each spin against each other (four small zoo models took 2.8 s to
# build with two torch threads on a busy machine, 0.6 s with one). Set before any test module imports torch or numpy's
# BLAS; a value already in the environment wins. No test asserts anything of the thread count.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

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
