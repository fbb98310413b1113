"""Every text command fits a 120-column terminal: no printed line is wider than COLUMNS, and
the output is plain text (no escape codes) when stdout is not a terminal."""

from __future__ import annotations

import pytest

WIDTH = 120
# (command, its arguments); "{mappings}" and "{models}" are the shipped directories
COMMANDS = [
    ["map", "{mappings}/r1_decode.yaml"],
    ["map", "{mappings}/r1_decode.yaml", "--ops"],
    ["map", "{mappings}/r1_prefill.yaml", "--ops"],
    ["validate"],
    ["calibrate", "--max-evals", "1"],
    ["model", "{models}/deepseek-r1.yaml"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_output_fits_columns(
    run_cli, mappings_dir, models_dir, monkeypatch: pytest.MonkeyPatch, args
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    code, out, err = run_cli([a.format(mappings=mappings_dir, models=models_dir) for a in args])
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) > 5
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, f"{len(wide)} lines wider than {WIDTH}: {wide[0]!r}"
    assert "\x1b" not in out


def test_narrower_columns_narrow_the_map_report(run_cli, mappings_dir, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, wide, _ = run_cli(["map", mappings_dir / "r1_decode.yaml"])
    monkeypatch.setenv("COLUMNS", "100")
    _, narrow, _ = run_cli(["map", mappings_dir / "r1_decode.yaml"])
    assert max(len(line) for line in narrow.splitlines()) <= 100
    assert max(len(line) for line in wide.splitlines()) > 100  # rows on one line each
