"""Every text command fits the terminal: no printed line is wider than COLUMNS, and the output is
plain text (no escape codes) when stdout is not a terminal.

`rdusim validate` and `rdusim calibrate` take minutes, so their text is rendered from data shaped
exactly like their results (`tests.evidence_fakes`: the shipped evidence and ensemble) through the
renderers the commands use, at the widths of common terminals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from rdusim.report.evidence import render_calibration, render_validation
from tests.evidence_fakes import fake_calibration, fake_validation

WIDTH = 120
WIDTHS = (80, 100, 120)
# (command, its arguments); "{mappings}" and "{models}" are the shipped directories
COMMANDS = [
    ["map", "{mappings}/r1_decode.yaml"],
    ["map", "{mappings}/r1_decode.yaml", "--ops"],
    ["map", "{mappings}/r1_prefill.yaml", "--ops"],
    ["model", "{models}/deepseek-r1.yaml"],
]


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_output_fits_columns(
    run_cli, mappings_dir, models_dir, monkeypatch: pytest.MonkeyPatch, args
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    code, out, err = run_cli([a.format(mappings=mappings_dir, models=models_dir) for a in args])
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) > 5
    wide = _too_wide(out, WIDTH)
    assert not wide, f"{len(wide)} lines wider than {WIDTH}: {wide[0]!r}"
    assert "\x1b" not in out


def test_narrower_columns_narrow_the_map_report(run_cli, mappings_dir, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, wide, _ = run_cli(["map", mappings_dir / "r1_decode.yaml"])
    monkeypatch.setenv("COLUMNS", "100")
    _, narrow, _ = run_cli(["map", mappings_dir / "r1_decode.yaml"])
    assert max(len(line) for line in narrow.splitlines()) <= 100
    assert max(len(line) for line in wide.splitlines()) > 100  # rows on one line each


# --- validate and calibrate, from their results' data -----------------------------------------

RENDERERS: dict[str, tuple[Callable[..., str], Callable[[], Mapping[str, Any]]]] = {
    "validate": (render_validation, lambda: fake_validation().as_dict()),
    "calibrate": (render_calibration, lambda: fake_calibration().as_dict()),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", list(RENDERERS))
def test_evidence_commands_fit_columns(
    command: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text `rdusim validate` / `rdusim calibrate` print, at COLUMNS=80, 100 and 120."""
    render, data = RENDERERS[command]
    monkeypatch.setenv("COLUMNS", str(width))
    text = render(data())  # the width from COLUMNS, as the commands get it
    assert len(text.splitlines()) > 10
    wide = _too_wide(text, width)
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[0]!r}"
    assert "\x1b" not in text


def test_validate_shows_the_null_model_columns_only_when_there_is_room() -> None:
    data = fake_validation().as_dict()
    narrow, wide = render_validation(data, 100), render_validation(data, 160)
    assert "const" not in narrow.split("coverage:")[0] and "--json" in narrow
    assert "const" in wide.split("coverage:")[0] and "roof" in wide.split("coverage:")[0]
    assert not _too_wide(wide, 160)
