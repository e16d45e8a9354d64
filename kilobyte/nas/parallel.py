"""Search stage: where evaluations run — this process, a local process pool, or a Ray cluster — for every strategy.

`open_pool(make_worker, spec)` is the one pool: each worker builds its task function once from `spec` and runs
torch on one thread (`pin_one_thread`; in this process `one_thread`), so a task gives the same result wherever it
runs. μNAS submits candidates to it (`unas_eval.make_worker`: train, quantise, measure); TinyNAS's
`supernet_train.open_fitness` submits a generation's subnets (`scorer_worker`: every worker builds the same
`SubnetScorer` from one `ScorerSpec`) and yields each accuracy as soon as it is done, so the store commits evaluations
one by one. Ray is the distributed engine (`ray.init(address=...)`): one actor per CPU of the cluster. This module
knows no strategy: it imports nothing of the search.
"""

from __future__ import annotations

import socket
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager

from ..errors import KilobyteError


class RayError(KilobyteError):
    """Ray is missing or the cluster cannot be reached."""


@contextmanager
def _ray_session(address: str):
    """Ray connected to the cluster at `address` (or the one this process is already connected to)."""
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
        yield ray
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


# -- a general pool of tasks: submit(key, payload), collect() -> (key, result) -----------------------------------------
class TaskPool:
    """Runs `make_worker(spec)(payload)` for submitted payloads — in this process (workers <= 1: each task runs when
    collected, in submission order), on a local process pool, or on Ray actors (one per cluster CPU, round robin) —
    and hands back results as they finish. Every worker runs torch on one thread, so a task gives the same result
    wherever it runs. `nodes` counts tasks per Ray node (empty elsewhere)."""

    def __init__(self, submit, collect, capacity: int):
        self.submit, self.collect, self.capacity, self.nodes = submit, collect, capacity, {}


_WORKER: dict = {}


def pin_one_thread() -> None:
    """torch on one thread for the rest of this worker process's life (one process per core)."""
    import torch

    torch.set_num_threads(1)


def _task_init(make_worker, spec) -> None:
    pin_one_thread()
    _WORKER["run"] = make_worker(spec)


def _task_run(payload):
    return _WORKER["run"](payload)


@contextmanager
def one_thread():
    """torch on one thread inside the block, as on every worker: a training's result then does not depend on the
    machine's core count (threads change the order floating-point sums are taken in)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def open_pool(make_worker, spec, workers: int = 1, ray_address: str | None = None):
    """A `TaskPool` (class doc). `make_worker` must be a module-level function (it is pickled to the workers)."""
    if ray_address:
        with _ray_session(ray_address) as ray:
            actor_cls = ray.remote(num_cpus=1)(_RayWorker)
            n = max(1, int(ray.cluster_resources().get("CPU", 1)))
            spec_ref = ray.put(spec)
            actors = [actor_cls.remote(make_worker, spec_ref) for _ in range(n)]
            running: dict = {}
            turn = [0]

            def submit(key, payload):
                actor = actors[turn[0] % len(actors)]
                turn[0] += 1
                running[actor.run.remote(payload)] = key

            def collect():
                done, _ = ray.wait(list(running), num_returns=1)
                key = running.pop(done[0])
                result, node = ray.get(done[0])
                pool.nodes[node] = pool.nodes.get(node, 0) + 1
                return key, result

            pool = TaskPool(submit, collect, n)
            yield pool
    elif workers <= 1:
        worker = make_worker(spec)
        queue: list = []

        def submit(key, payload):
            queue.append((key, payload))

        def collect():
            key, payload = queue.pop(0)
            with one_thread():
                return key, worker(payload)

        yield TaskPool(submit, collect, 1)
    else:
        with ProcessPoolExecutor(workers, initializer=_task_init, initargs=(make_worker, spec)) as executor:
            futures: dict = {}

            def submit(key, payload):
                futures[executor.submit(_task_run, payload)] = key

            def collect():
                done, _ = wait(list(futures), return_when=FIRST_COMPLETED)
                first = min(done, key=futures.get)
                return futures.pop(first), first.result()

            yield TaskPool(submit, collect, workers)


class _RayWorker:
    def __init__(self, make_worker, spec):
        import ray

        pin_one_thread()
        self.worker = make_worker(spec)
        self.node = ray.get_runtime_context().get_node_id()

    def run(self, payload):
        return self.worker(payload), self.node
