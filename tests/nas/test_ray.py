"""Search evaluations on a real two-node local Ray cluster (`ray start --head` + a second node joining it): the same
results as the local process pool, and the work really spread over both nodes. The clusters are stopped by killing
only the processes they started (tests/ray_cluster.py), never with `ray stop`, which stops every Ray cluster on the
machine: a one-node cluster started and stopped while the module's cluster runs leaves that one (used by the test
after it) and a stranger's Ray worker alive."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from ray_cluster import free_port, group_members, local_cluster

from kilobyte.nas.evolution import EvolutionConfig, evolve
from kilobyte.nas.parallel import RayError
from kilobyte.nas.resources import Budget, ResourceEvaluator
from kilobyte.nas.space import MBSpace
from kilobyte.nas.supernet import SuperNet
from kilobyte.nas.supernet_train import ScorerSpec, open_fitness

# One xdist worker for the whole module (conftest groups modules with a module-scoped fixture too; said here since
# the cluster is the reason): one two-node cluster, not one per worker.
pytestmark = pytest.mark.xdist_group("ray_cluster")

SPACE = MBSpace(num_classes=10, in_channels=1)


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(nodes=2) as (address, _):
        yield address


def _spec():
    torch.manual_seed(0)
    net = SuperNet(SPACE, 0.2, 16)
    rng = np.random.default_rng(0)
    x = rng.random((64, 1, 16, 16), dtype=np.float32)
    return ScorerSpec.of(net, x, rng.random((40, 1, 16, 16), dtype=np.float32), rng.integers(0, 10, 40))


def test_ray_cluster_gives_the_local_pool_results(cluster):
    spec = _spec()
    space = SPACE.with_config(0.2, 16)
    evaluator = ResourceEvaluator(space)
    budget = Budget(32 * 1024, 256 * 1024)
    config = EvolutionConfig(population=8, parents=3, generations=2, seed=4)
    with open_fitness(spec, workers=2) as fitness:
        local = evolve(space, evaluator, budget, fitness, config)
    with open_fitness(spec, ray_address=cluster) as fitness:
        remote = evolve(space, evaluator, budget, fitness, config)
        nodes = dict(fitness.nodes)
    assert remote.history == local.history and remote.best == local.best
    assert len(nodes) == 2 and sum(nodes.values()) == remote.evaluations, nodes


def test_unreachable_cluster_is_a_one_line_error():
    port = free_port()
    with pytest.raises(RayError, match=f"--ray 127.0.0.1:{port}: cannot connect"):
        with open_fitness(_spec(), ray_address=f"127.0.0.1:{port}"):
            pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stopping_a_cluster_leaves_other_ray_processes_alive():
    """The teardown kills the processes its `ray start`s launched and no others: a stand-in for another run's Ray
    worker (`default_worker.py` on its command line, which `ray stop --force` matches and kills) survives it."""
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "default_worker.py"])
    try:
        with local_cluster(nodes=1) as (_, groups):
            ours = group_members(groups)
            assert len(ours) >= 3 and foreign.pid not in ours, ours  # gcs_server, raylet, monitor, ...
        time.sleep(0.5)
        assert foreign.poll() is None, "the teardown killed a Ray process it had not started"
        assert not [pid for pid in ours if _alive(pid)], "the teardown left some of its own Ray processes running"
    finally:
        foreign.kill()
        foreign.wait()


def test_unas_search_on_the_cluster_gives_the_local_results(cluster, tmp_path):
    """A μNAS search (one evaluation in flight, so its course is fixed) on the two-node cluster: the same candidates
    and objectives, in the same order, as in this process; the evaluations ran on both nodes."""
    import sqlite3

    from kilobyte.nas.unas_search import UnasConfig, run_unas

    config = UnasConfig(data="digits", evaluations=8, population=4, sample=2, epochs=1, prune="none",
                        bounds={"error": 0.5, "peak_bytes": 4096.0, "weight_bytes": 3e5}, seed=5,
                        final_epochs=0)  # the search, not the chosen member's 100-epoch final training
    quiet = dict(log=lambda *a: None, deploy=False)
    local = run_unas(config, tmp_path / "local", **quiet)
    remote = run_unas(config, tmp_path / "ray", ray_address=cluster, **quiet)

    def rows(d):
        db = sqlite3.connect(d / "search.sqlite")
        try:
            return db.execute("SELECT generation, idx, arch, accuracy FROM evaluations ORDER BY generation").fetchall()
        finally:
            db.close()
    assert rows(tmp_path / "ray") == rows(tmp_path / "local") and len(rows(tmp_path / "local")) == 8
    assert remote["pareto"] == local["pareto"]
    assert len(remote["nodes"]) == 2 and sum(remote["nodes"].values()) == 8, remote["nodes"]
