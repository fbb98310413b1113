"""Every notebook in notebooks/ runs top to bottom without an error, from any directory.

The notebooks run in a real Jupyter kernel ("python3", from ipykernel, a test dependency) with an
empty temporary directory as the working directory: a notebook names shipped mappings and models
by name, so it runs wherever a reader opens it. `pip install -e '.[test]'` (or the `notebooks`
extra) brings what runs them, `jupyter nbconvert` included.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nbclient
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient.exceptions import CellExecutionError

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PYPROJECT = REPO_ROOT / "pyproject.toml"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
KERNEL = "python3"
TIMEOUT_S = 300
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colour codes in kernel tracebacks


@pytest.fixture(scope="module")
def kernel_name() -> str:
    try:
        import ipykernel  # noqa: F401
    except ImportError:
        pytest.fail("ipykernel is not installed: run pip install -e '.[test]'")
    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        pytest.fail(
            f"no Jupyter kernel named {KERNEL!r}: run pip install -e '.[test]' "
            "(or python -m ipykernel install --user)"
        )
    return KERNEL


def test_notebooks_found() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOKS_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_saved_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    with_outputs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("outputs")]
    assert not with_outputs, f"{path.name}: clear the outputs of cells {with_outputs}"


def test_the_extras_bring_what_runs_the_notebooks() -> None:
    """`jupyter nbconvert --execute` (the README's command) and the kernel come with the test
    extra and with the notebooks extra."""
    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    for extra in ("test", "notebooks"):
        names = {re.split(r"[\[<>=~! ]", req, maxsplit=1)[0].lower() for req in extras[extra]}
        assert {"nbconvert", "ipykernel", "nbclient", "nbformat"} <= names, (extra, names)
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "jupyter nbconvert --to notebook --execute" in readme
    assert "pip install -e '.[notebooks]'" in readme


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_name: str, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(tmp_path)}},  # any directory, not notebooks/
    )
    failure = None
    try:
        client.execute()
    except CellExecutionError as exc:
        failure = ANSI.sub("", str(exc))
    if failure is not None:
        pytest.fail(f"{path.name} failed:\n{failure}", pytrace=False)
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
