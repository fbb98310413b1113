"""Every notebook in notebooks/ runs top to bottom without an error, from any directory.

The notebooks run in a real Jupyter kernel ("python3", from ipykernel, a test dependency) with an
empty temporary directory as the working directory: a notebook names shipped mappings and models
by name, so it runs wherever a reader opens it. `pip install -e '.[test]'` (or the `notebooks`
extra) brings what runs them, `jupyter nbconvert` included.

While a notebook runs, every figure it draws is read as it is rendered: a series (a labelled
line, bar or marker set) keeps one colour in all of a notebook's figures, and SnapStream on and
off take their fixed colours (`rdusim.report.axes`).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

import nbclient
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from matplotlib.colors import to_hex
from nbclient.exceptions import CellExecutionError

from rdusim.report.axes import series_color

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


# Run before a notebook's first cell: every figure rendered (shown inline or saved) records the
# colour of each labelled series of its axes.
RECORD_COLOURS = """\
import matplotlib.backend_bases as _backend_bases
from matplotlib.colors import to_hex as _to_hex

_series_colours = []


def _colour_of(handle):
    for part in ("lines", "patches"):  # an errorbar's or a bar chart's container
        inner = getattr(handle, part, None)
        if inner:
            handle = inner[0]
            break
    for getter in ("get_color", "get_facecolor", "get_edgecolor"):
        if hasattr(handle, getter):
            colour = getattr(handle, getter)()
            if getattr(colour, "ndim", 0) == 2:
                colour = colour[0] if len(colour) else None
            if colour is not None and len(colour):
                return _to_hex(colour, keep_alpha=False)
    return None


def _recording_print_figure(self, *args, **kwargs):
    legends = [*self.figure.legends, *(ax.get_legend() for ax in self.figure.axes)]
    for legend in filter(None, legends):  # a legend's own handles: drawn or made for it
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            _series_colours.append((text.get_text(), _colour_of(handle)))
    for ax in self.figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            _series_colours.append((label, _colour_of(handle)))
    return _print_figure(self, *args, **kwargs)


_print_figure = _backend_bases.FigureCanvasBase.print_figure
_backend_bases.FigureCanvasBase.print_figure = _recording_print_figure
"""
# a cell that makes a figure (rdusim's `*_figure(...)` returns one that pyplot does not manage,
# so `plt.show()` after it shows nothing: the figure must be the cell's value)
FIGURE_MADE = re.compile(r"\w_figure\(|plt\.subplots\(|plt\.figure\(")
REPORT_COLOURS = "import json as _json\nprint(_json.dumps(_series_colours))"


def colour_problems(series: Iterable[tuple[str, str | None]]) -> list[str]:
    """What breaks the figure style among (label, colour) pairs: a label in two colours, or
    SnapStream on or off in another colour than its own."""
    seen: dict[str, set[str | None]] = {}
    for label, colour in series:
        seen.setdefault(label, set()).add(colour)
    problems = [f"{label!r} in {sorted(map(str, c))}" for label, c in seen.items() if len(c) > 1]
    for label, colours in seen.items():
        fixed = series_color(label, 99)  # the cycle's colours answer "C9"
        if fixed != "C9" and colours != {to_hex(fixed)}:
            problems.append(f"{label!r} in {sorted(map(str, colours))}, not {fixed}")
    return problems


def test_colour_problems_are_found() -> None:
    orange, grey = to_hex("tab:orange"), to_hex("tab:gray")
    fine = [("snapstream.enabled=true", orange), ("no SnapStream", grey), ("x", "#000000")]
    assert colour_problems([*fine, ("x", "#000000")]) == []
    assert colour_problems([*fine, ("x", "#ffffff")]) == ["'x' in ['#000000', '#ffffff']"]
    assert colour_problems([("SnapStream", to_hex("tab:blue"))]) == [
        "'SnapStream' in ['#1f77b4'], not tab:orange"
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_name: str, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(RECORD_COLOURS))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT_COLOURS))
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
    unseen = [
        i
        for i, cell in enumerate(nb.cells[1:-1])
        if cell.cell_type == "code"
        and FIGURE_MADE.search(cell.source)
        and not any("image/png" in o.get("data", {}) for o in cell.outputs)
    ]
    assert not unseen, f"{path.name}: cells {unseen} make a figure and show none"
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")
    series = [tuple(pair) for pair in json.loads(printed)]
    assert series, f"{path.name}: no labelled series recorded"
    assert not colour_problems(series), f"{path.name}: {colour_problems(series)}"
