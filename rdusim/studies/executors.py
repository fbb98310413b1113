"""Where sweep points run: local processes, or a dask.distributed cluster.

A sweep is embarrassingly parallel: every point loads, compiles and simulates on its own. The
local executor uses this machine's cores; the dask executor hands the points to a
dask.distributed cluster (a local one by default, or a running scheduler by address) when a
design-space sweep outgrows one machine. Both return results in grid order, so rows never depend
on where or in which order points ran. Workers must see the mapping's files at the same paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from rdusim.errors import SpecError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from distributed import Client

T = TypeVar("T")
Task = Callable[[str, Any], T]


class ExecutorKind(StrEnum):
    LOCAL = "local"  # this machine: one process per point, `jobs` at a time
    DASK = "dask"  # a dask.distributed cluster


def run_points(
    task: Task[T],
    path: str,
    points: Sequence[Any],
    *,
    executor: ExecutorKind = ExecutorKind.LOCAL,
    jobs: int = 1,
    scheduler: str | None = None,
    progress: Callable[[], None] | None = None,
) -> list[T]:
    """`task(path, point)` for every point, results in grid order."""
    if executor == ExecutorKind.DASK:
        return _on_dask(task, path, points, jobs, scheduler, progress)
    if scheduler is not None:
        raise SpecError(
            "--scheduler applies to the dask executor",
            key="--scheduler",
            fix="add --executor dask, or drop --scheduler",
        )
    if jobs <= 1 or len(points) <= 1:
        return [_counted(task(path, p), progress) for p in points]
    return _on_processes(task, path, points, jobs, progress)


def _counted(result: T, progress: Callable[[], None] | None) -> T:
    if progress:
        progress()
    return result


def _on_processes(
    task: Task[T],
    path: str,
    points: Sequence[Any],
    jobs: int,
    progress: Callable[[], None] | None,
) -> list[T]:
    # imported here: the command line declares the executors at start-up, and multiprocessing
    # with its sockets and logging is a tenth of a second that only a parallel sweep needs
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list[T | None] = [None] * len(points)
    with ProcessPoolExecutor(max_workers=min(jobs, len(points))) as pool:
        futures: dict[Future[T], int] = {
            pool.submit(task, path, p): i for i, p in enumerate(points)
        }
        try:
            for fut in as_completed(futures):
                results[futures[fut]] = _counted(fut.result(), progress)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return [r for r in results if r is not None]


@contextmanager
def _dask_client(jobs: int, scheduler: str | None) -> Iterator[Client]:
    """A client of the cluster at `scheduler`, or of a local cluster of `jobs` workers."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SpecError(
            "the dask executor needs dask.distributed, which is not installed",
            key="--executor",
            fix="pip install 'rdusim[dask]' (or use --executor local)",
        ) from None
    if scheduler is None:
        with (
            LocalCluster(
                n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
        return
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise SpecError(
            f"cannot reach the dask scheduler at {scheduler!r}: {exc}",
            key="--scheduler",
            fix="give the scheduler's address (e.g. tcp://host:8786) and check it is running",
        ) from None
    with client:
        yield client


def _on_dask(
    task: Task[T],
    path: str,
    points: Sequence[Any],
    jobs: int,
    scheduler: str | None,
    progress: Callable[[], None] | None,
) -> list[T]:
    from distributed import as_completed as completed

    results: list[T | None] = [None] * len(points)
    with _dask_client(max(1, jobs), scheduler) as client:
        futures = [client.submit(task, path, p, pure=False) for p in points]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in completed(futures):
                results[index[fut.key]] = _counted(fut.result(), progress)
        except BaseException:
            client.cancel(futures)
            raise
    return [r for r in results if r is not None]
