"""The mutation run (`benchmarks/mutation.py`): its list still applies (fast), and no mutant
survives the fast tests (slow, about two and a half minutes on two cores)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "mutation.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rdusim_mutation_run", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutant_applies_once_and_still_parses() -> None:
    run = load_script()
    assert len(run.MUTANTS) >= 40
    assert len({(m.path, m.old, m.new) for m in run.MUTANTS}) == len(run.MUTANTS)
    for m in run.MUTANTS:
        source = (ROOT / m.path).read_text()
        mutated = run.mutate(source, m)  # raises unless the text occurs exactly once
        assert mutated != source
        ast.parse(mutated)


def test_the_run_covers_the_cost_model_the_cut_search_and_the_serving_metrics() -> None:
    run = load_script()
    files = {m.path for m in run.MUTANTS}
    assert {
        "rdusim/cost/analytic.py",
        "rdusim/cost/calls.py",
        "rdusim/search/boundaries.py",
        "rdusim/serving/metrics.py",
    } == files
    for path in files:
        assert run.TESTS[path], path
        assert all((ROOT / t).is_file() for t in run.TESTS[path]), path


def test_a_mutant_whose_text_is_gone_is_refused() -> None:
    run = load_script()
    m = run.Mutant("rdusim/cost/analytic.py", "no such text", "x", "nothing")
    with pytest.raises(ValueError, match="occurs 0 times"):
        run.mutate((ROOT / m.path).read_text(), m)


@pytest.mark.slow
def test_no_mutant_survives_the_fast_tests() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " 0 survived" in proc.stdout
