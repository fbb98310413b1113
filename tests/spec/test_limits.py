"""rdusim's bounds on sizes have one home, `rdusim.spec.limits`, which every check reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rdusim
from rdusim.spec import limits
from rdusim.spec.model import LIMITS
from rdusim.spec.workload import MAX_TOKENS

PACKAGE_DIR = Path(rdusim.__file__).resolve().parent


@pytest.mark.parametrize("name", ["MAX_SEQ_LEN", "MAX_BATCH"])
def test_each_limit_is_defined_once(name: str) -> None:
    # a module-level assignment (an enum member such as `Metric.MAX_BATCH` is indented)
    assignment = re.compile(rf"^{name}\s*(:[^=]*)?=", re.MULTILINE)
    homes = [
        path.relative_to(PACKAGE_DIR).as_posix()
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if assignment.search(path.read_text(encoding="utf-8"))
    ]
    assert homes == ["spec/limits.py"]


def test_a_sequence_has_one_bound_everywhere() -> None:
    assert LIMITS["max_position_embeddings"] == limits.MAX_SEQ_LEN
    assert LIMITS["sliding_window"] == limits.MAX_SEQ_LEN
    assert MAX_TOKENS == limits.MAX_SEQ_LEN
