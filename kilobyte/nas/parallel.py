"""Search stage: where subnet evaluations run — this process, a local process pool, or a Ray cluster.

Every worker builds the same `SubnetScorer` from one `ScorerSpec` (the space, the configuration, the trained
supernet's weights as bytes, the calibration and validation images) and scores on one thread, so a subnet gets the
same accuracy wherever it runs. `open_fitness` returns the `Fitness` callable the evolution uses: it submits a
generation's subnets and yields each result as soon as it is done, so the store commits evaluations one by one.
Ray is the distributed engine (`ray.init(address=...)`): one actor per CPU of the cluster, each holding its scorer.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError
from .space import Arch, MBSpace


@dataclass(frozen=True)
class ScorerSpec:
    space: dict  # MBSpace JSON
    width: float
    resolution: int
    weights: bytes  # torch.save(state_dict) of the trained supernet
    calib_x: np.ndarray  # NCHW float32 at the resolution
    val_x: np.ndarray
    val_y: np.ndarray

    @staticmethod
    def of(net, calib_x, val_x, val_y) -> ScorerSpec:
        import torch

        buf = io.BytesIO()
        torch.save(net.state_dict(), buf)
        return ScorerSpec(net.space.to_json(), net.space.widths[0], net.space.resolutions[0], buf.getvalue(),
                          np.ascontiguousarray(calib_x), np.ascontiguousarray(val_x), np.ascontiguousarray(val_y))


def build_scorer(spec: ScorerSpec):
    import torch

    from .supernet import SuperNet
    from .supernet_train import SubnetScorer

    net = SuperNet(MBSpace.from_json(spec.space), spec.width, spec.resolution)
    net.load_state_dict(torch.load(io.BytesIO(spec.weights), weights_only=False))
    return SubnetScorer(net, torch.from_numpy(spec.calib_x), torch.from_numpy(spec.val_x),
                        torch.from_numpy(spec.val_y))


_SCORER: dict = {}


def _pool_init(spec: ScorerSpec) -> None:
    import torch

    torch.set_num_threads(1)  # one process per core
    _SCORER["scorer"] = build_scorer(spec)


def _pool_score(arch_json: str) -> float:
    return _SCORER["scorer"](Arch.from_json(arch_json))


@contextmanager
def open_fitness(spec: ScorerSpec, workers: int = 1, ray_address: str | None = None):
    """A `Fitness` over the spec's subnets: in this process (workers <= 1), a local process pool, or Ray."""
    if ray_address:
        with _ray_fitness(spec, ray_address) as fitness:
            yield fitness
    elif workers <= 1:
        scorer = build_scorer(spec)

        def serial(archs: list[Arch]) -> Iterator[tuple[int, float]]:
            for i, arch in enumerate(archs):
                yield i, scorer(arch)
        yield serial
    else:
        with ProcessPoolExecutor(workers, initializer=_pool_init, initargs=(spec,)) as pool:
            def pooled(archs: list[Arch]) -> Iterator[tuple[int, float]]:
                futures = {pool.submit(_pool_score, a.dumps()): i for i, a in enumerate(archs)}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in sorted(done, key=futures.get):
                        yield futures[f], f.result()
            yield pooled


class RayError(KilobyteError):
    """Ray is missing or the cluster cannot be reached."""


@contextmanager
def _ray_fitness(spec: ScorerSpec, address: str):
    try:
        import ray
    except ImportError:
        raise RayError("--ray needs Ray: pip install 'kilobyte[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False,
                     runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
        except Exception as e:  # ray raises ConnectionError, RuntimeError, ... depending on the failure
            raise RayError(f"--ray {address}: cannot connect to the Ray cluster ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''})") from None
    try:
        actor_cls = ray.remote(num_cpus=1)(_RayScorer)
        n = max(1, int(ray.cluster_resources().get("CPU", 1)))
        spec_ref = ray.put(spec)
        actors = [actor_cls.remote(spec_ref) for _ in range(n)]

        def fitness(archs: list[Arch]) -> Iterator[tuple[int, float]]:
            queue = list(enumerate(archs))
            running = {}
            free = list(actors)
            while queue or running:
                while queue and free:
                    i, arch = queue.pop(0)
                    actor = free.pop()
                    running[actor.score.remote(arch.dumps())] = (i, actor)
                done, _ = ray.wait(list(running), num_returns=1)
                i, actor = running.pop(done[0])
                free.append(actor)
                accuracy, node = ray.get(done[0])
                fitness.nodes[node] = fitness.nodes.get(node, 0) + 1
                yield i, accuracy
        fitness.nodes = {}  # Ray node id -> evaluations it ran (tests check the work was spread)
        yield fitness
    finally:
        if started_here:
            ray.shutdown()


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on (`ray.init` would keep retrying for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "ray://...", ...: Ray resolves and reports those itself
    try:
        socket.create_connection((host.removeprefix("ray://") or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayError(f"--ray {address}: cannot connect to the Ray cluster ({e.strerror or e})") from None


class _RayScorer:
    def __init__(self, spec: ScorerSpec):
        import ray
        import torch

        torch.set_num_threads(1)
        self.scorer = build_scorer(spec)
        self.node = ray.get_runtime_context().get_node_id()

    def score(self, arch_json: str) -> tuple[float, str]:
        return self.scorer(Arch.from_json(arch_json)), self.node
