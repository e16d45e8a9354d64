"""Test-wide settings: hypothesis profiles (derandomised on CI so a run is reproducible), one compute thread per
xdist worker, a module's tests that share its module-scoped fixture kept on one worker, and `one_torch_thread`
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Keep a test module on one xdist worker when its tests share a module-, class- or session-scoped fixture the
    module defines (an expensive search, a compiled model, a cluster): with pyproject's `--dist loadgroup`, `-n 2`
    would otherwise hand alternate tests of the module to both workers, and both would build the fixture. Runs before
    xdist reads the `xdist_group` marks; other tests are spread one by one as before."""
    for item in items:
        module_id = item.nodeid.split("::")[0]
        info = getattr(item, "_fixtureinfo", None)
        defs = [] if info is None else [d for ds in info.name2fixturedefs.values() for d in ds]
        if any(d.scope != "function" and d.baseid == module_id for d in defs):
            item.add_marker(pytest.mark.xdist_group(module_id))
