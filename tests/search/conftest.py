"""Fixtures of the search's fast tests: the tiny models and mappings of `tests/search/tiny.py`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rdusim.spec.mapping import ResolvedMapping
from tests.search.tiny import load_tiny, write_tiny

TinyMapping = Callable[..., ResolvedMapping]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path) -> TinyMapping:
    """`tiny("decode", "batch=8", model="tiny-llama-1")`: a tiny mapping, loaded."""

    def load(phase: str, *overrides: str, model: str = "tiny-llama") -> ResolvedMapping:
        return load_tiny(tiny_dir, phase, *overrides, model=model)

    return load
