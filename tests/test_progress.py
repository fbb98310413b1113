"""Progress on long work goes to stderr, and only when stderr is a terminal: the auto-mapper's
stages and candidate counts, `serve`'s requests per point, the sweep's points, and the fits of
`validate` and `calibrate`. Piped, stderr stays empty."""

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


SWEEP = ["sweep", "llama31_8b_decode", "--set", "seq_len=8192,16384", "--jobs", "1"]


def test_sweep_shows_a_terminal_its_points(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.chdir(tmp_path)
    err = run(SWEEP, capsys, monkeypatch, tty=True)
    assert "sweep" in err and "2/2" in err


def test_sweep_is_silent_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(SWEEP, capsys, monkeypatch, tty=False) == ""


def test_serve_is_silent_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(SERVE, capsys, monkeypatch, tty=False) == ""


# `rdusim validate` and `rdusim calibrate` take minutes: their fits are replaced by stand-ins
# that report progress as the real ones do and return results shaped like theirs.
FIT_MESSAGES = ["r1_prefill seq_len=131072", "mode: iteration 1, log posterior -3.000"]


def _fake_validate(progress=None, **_kwargs):  # type: ignore[no-untyped-def]
    from tests.evidence_fakes import fake_validation

    for message in [*FIT_MESSAGES, "leave-one-out: 1/2 a", "leave-one-out: 2/2 b"]:
        if progress:
            progress(message)
    return fake_validation()


def _fake_calibrate(draws=0, seed=0, progress=None):  # type: ignore[no-untyped-def]
    from tests.evidence_fakes import fake_calibration

    for message in [*FIT_MESSAGES, "sampling the linearised posterior"]:
        if progress:
            progress(message)
    return fake_calibration()


@pytest.fixture
def fake_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    import rdusim.validation.calibrate
    import rdusim.validation.check

    monkeypatch.setattr(rdusim.validation.check, "validate", _fake_validate)
    monkeypatch.setattr(rdusim.validation.calibrate, "calibrate", _fake_calibrate)


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_the_evidence_commands_show_a_terminal_one_status_line(
    command: str,
    fake_fits: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capsys.readouterr()
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    main([command])
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    err = terminal.getvalue()
    assert "\n" not in err  # one line, each message overwriting the last
    shown = err.split("\r\033[K")
    assert shown[1:3] == FIT_MESSAGES
    assert shown[-1] == ""  # cleared before the report is printed
    assert capsys.readouterr().out.strip()  # the report, on stdout


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_the_evidence_commands_are_silent_in_a_pipe(
    command: str, fake_fits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    main([command])
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out


def test_a_status_line_is_cut_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """A status line wider than the terminal would wrap, and the next message could not
    overwrite it."""
    from rdusim.cli.progress import status_line

    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("COLUMNS", "60")
    show = status_line()
    assert show is not None
    show("x" * 200)
    assert terminal.getvalue() == "\r\033[K" + "x" * 59
