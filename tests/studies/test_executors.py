"""Where sweep points run: serially, on local processes, or on a dask.distributed cluster; the
rows are the same in every case, in grid order."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.studies.executors import ExecutorKind, run_points
from rdusim.studies.sweep import grid, parse_axes, run_sweep


def _square(path: str, point: int) -> tuple[str, int]:
    return path, point * point


def test_local_serial_and_processes_keep_grid_order() -> None:
    points = list(range(7))
    want = [("p", i * i) for i in points]
    assert run_points(_square, "p", points, jobs=1) == want
    assert run_points(_square, "p", points, jobs=3) == want


def test_progress_is_called_once_per_point() -> None:
    ticks: list[int] = []
    run_points(_square, "p", [1, 2, 3], jobs=1, progress=lambda: ticks.append(1))
    assert len(ticks) == 3


def test_scheduler_needs_the_dask_executor() -> None:
    with pytest.raises(SpecError) as info:
        run_points(_square, "p", [1], scheduler="tcp://127.0.0.1:1")
    assert info.value.key == "--scheduler"


def test_unreachable_scheduler_is_a_user_error() -> None:
    pytest.importorskip("distributed")
    with pytest.raises(SpecError) as info:
        run_points(_square, "p", [1], executor=ExecutorKind.DASK, scheduler="tcp://127.0.0.1:9")
    assert info.value.key == "--scheduler" and "cannot reach" in info.value.problem


def test_a_sweep_on_a_local_dask_cluster_gives_the_local_rows(mappings_dir: Path) -> None:
    pytest.importorskip("distributed")
    path = mappings_dir / "r1_decode.yaml"
    points = grid(parse_axes(["batch=1,16", "seq_len=8192"]))
    local = run_sweep(path, points, jobs=1)
    dask = run_sweep(path, points, jobs=2, executor=ExecutorKind.DASK)
    assert dask == local
    assert [r["batch"] for r in dask] == [1, 16]
