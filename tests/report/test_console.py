"""The terminal helpers: the width they fit, tables whose long cells wrap, wrapped lists."""

from __future__ import annotations

import io
import re

import pytest

from rdusim.report import console
from rdusim.report.console import table, table_blocks, terminal_width, wrap_items, wrap_text


def _width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize(("columns", "width"), [("100", 100), ("250", 250), ("10", 40)])
def test_width_comes_from_columns(
    monkeypatch: pytest.MonkeyPatch, columns: str, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert terminal_width() == width  # never below MIN_WIDTH


def test_width_defaults_to_120_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("sys.stdout", io.StringIO())  # a pipe or a file, not a tty
    assert terminal_width() == console.DEFAULT_WIDTH == 120


def test_table_without_wrapping_is_unchanged() -> None:
    text = table(["name", "n"], [["a", 1], ["bb", 22]], width=120)
    assert text.splitlines() == ["name   n", "----  --", "a      1", "bb    22"]


def test_long_cells_wrap_in_the_given_order() -> None:
    rows = [["Streaming Ring Buffer", "first second third fourth", 1040]]
    head, (block,) = table_blocks(["kernel", "note", "PCUs"], rows, "<<>", width=40, wrap=(1, 0))
    assert _width("\n".join([*head, *block])) <= 40
    assert block[0].startswith("Streaming Ring Buffer") and block[0].endswith("1040")
    notes = [line[23:29].strip() for line in block]
    assert notes == ["first", "second", "third", "fourth"]  # the note wrapped, nothing lost


def test_default_wrap_shrinks_the_widest_text_column_first() -> None:
    rows = [["x" * 5, "some words " * 6, "short text"]]
    text = table(["a", "b", "c"], rows, "<<<", width=50)
    assert _width(text) <= 50
    assert text.splitlines()[2].endswith("short text")


def test_table_overflows_rather_than_break_words_it_cannot_fit() -> None:
    text = table(["a"], [["unbreakable_name_of_forty_characters_xyz"]], width=20)
    assert "unbreakable_name_of_forty_characters_xyz" in text


def test_table_that_cannot_fit_keeps_its_natural_layout() -> None:
    rows = [["some long words here", "1,815 tok/s", "7,903 tok/s"]]
    natural = table(["cell", "simulated", "published"], rows, "<>>", width=200)
    assert table(["cell", "simulated", "published"], rows, "<>>", width=30) == natural
    assert len(natural.splitlines()) == 3  # one line per row: nothing half-wrapped


def test_wrap_items_keeps_items_whole() -> None:
    items = [f"op_{i} [dp16]" for i in range(12)]
    lines = wrap_items(items, 40, prefix="  ops: ")
    assert all(len(line) <= 40 for line in lines)
    assert lines[0].startswith("  ops: op_0 [dp16],")
    assert all(line.startswith(" " * 7) for line in lines[1:])
    assert re.findall(r"op_\d+ \[dp16\]", " ".join(lines)) == items


def test_wrap_items_splits_only_an_item_wider_than_a_line() -> None:
    lines = wrap_items(["a" * 60, "b"], 30, prefix="x: ")
    assert all(len(line) <= 30 for line in lines)
    assert "".join(line.strip().removeprefix("x:").strip() for line in lines) == "a" * 60 + ", b"


def test_wrap_text_indents_continuations() -> None:
    text = wrap_text("word " * 30, 40, subsequent="  ")
    lines = text.splitlines()
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines)
    assert all(line.startswith("  ") for line in lines[1:])


def test_plain_text_only() -> None:
    text = table(["a", "b"], [["x" * 50, "y " * 40]], width=60) + wrap_text("z " * 80, 60)
    assert "\x1b" not in text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1064.3, "1060"),
        (999.6, "1000"),
        (123456.0, "123000"),
        (102.4, "102"),
        (5.6149, "5.61"),
        (0.012345, "0.0123"),
        (1.234e-5, "0.0000123"),
        (0.0, "0"),
    ],
)
def test_three_significant_digits_never_with_an_exponent(value: float, text: str) -> None:
    assert console.sig3(value) == text


def test_an_interval_end_past_1000_of_the_unit_is_a_plain_number() -> None:
    # a 937 ms time to first token whose 95th percentile is past a second printed "1.06e+03"
    assert console.seconds_with(0.937229, {"p05": 0.8402, "p95": 1.0641}) == (
        "937.229 ms (840–1060)"
    )
    assert console.seconds_with(0.096013, {"p05": 0.0890, "p95": 0.1021}) == "96.013 ms (89–102)"
    assert "e+" not in console.seconds_with(1500.0, {"p05": 1400.0, "p95": 1600.0})
