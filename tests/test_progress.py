"""Progress on long work goes to stderr, and only when stderr is a terminal: the auto-mapper's
stages and candidate counts, and `serve`'s requests per point. Piped, stderr stays empty."""

from __future__ import annotations

import io
import sys

import pytest

from rdusim.cli import main

AUTO = ["map", "llama31_8b_decode", "--set", "kernels=auto"]
SERVE = [
    "serve",
    "--prefill",
    "r1_prefill",
    "--decode",
    "r1_decode",
    "--workload",
    "r1_disaggregated",
    "--rate",
    "0.5,1",
]


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal and keeps what was written to it."""

    def isatty(self) -> bool:
        return True


def run(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tty: bool
) -> str:
    """What `rdusim ARGS` wrote to stderr, with stderr a terminal or a pipe."""
    capsys.readouterr()
    if tty:
        terminal = FakeTerminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main(args) == 0
        monkeypatch.undo()
        return terminal.getvalue()
    assert main(args) == 0
    return capsys.readouterr().err


def test_the_auto_mapper_tells_a_terminal_its_stages_and_candidate_counts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    err = run(AUTO, capsys, monkeypatch, tty=True)
    lines = [line for line in err.splitlines() if line]
    assert all(line.startswith("auto-mapper: ") for line in lines), lines
    assert "auto-mapper: searching at batch" in err
    assert "layer kind 1/1 (dense): 15 ops under" in err
    assert "candidate kernels costed" in err
    assert "whole mappings estimated" in err and "simulating the best" in err
    assert "auto-mapper: done in" in err


def test_the_auto_mapper_is_silent_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(AUTO, capsys, monkeypatch, tty=False) == ""


def test_serve_shows_a_terminal_its_requests_and_which_point_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    err = run(SERVE, capsys, monkeypatch, tty=True)
    assert "serve 1/2 rate=0.5" in err
    assert "serve 2/2 rate=1" in err
    assert "2000/2000" in err


def test_serve_is_silent_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(SERVE, capsys, monkeypatch, tty=False) == ""
