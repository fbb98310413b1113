"""The headline numbers match `tests/golden/metrics.json`, so the model cannot drift inside the
paper's tolerance bands unnoticed; and the comparison behind that check reports what it claims.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import headline as golden

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "metrics.json"


@pytest.fixture(scope="module")
def metrics() -> golden.Metrics:
    return golden.collect()


def test_headline_metrics_match_the_golden_file(metrics: golden.Metrics) -> None:
    changes = golden.compare(golden.load(GOLDEN), metrics)
    differing = [c for c in changes if c.status != "same"]
    assert not differing, (
        f"{len(differing)} headline metrics differ from {GOLDEN} "
        f"(floats beyond {golden.RELATIVE_TOLERANCE:g} relative, integers exactly):\n\n"
        f"{golden.format_table(changes)}\n\n"
        "The golden file is a drift detector, not the truth. If the model was changed on "
        "purpose, review the table above and regenerate the file with\n\n"
        f"    {golden.UPDATE_COMMAND}\n"
    )


def test_the_golden_file_is_written_as_the_updater_writes_it() -> None:
    text = GOLDEN.read_text(encoding="utf-8")
    assert text == golden.dumps(golden.load(GOLDEN)), f"rewrite it: {golden.UPDATE_COMMAND}"


BEFORE: golden.Metrics = {
    "same.float": 1.0,
    "same.int": 3,
    "within.tolerance": 2.0,
    "changed.big": 2.0,
    "changed.small": 100.0,
    "changed.int": 64,
    "changed.large_int": 10**12,
    "changed.type": 16,
    "removed.key": 5.0,
}
AFTER: golden.Metrics = {
    "same.float": 1.0,
    "same.int": 3,
    "within.tolerance": 2.0 * (1 + 5e-10),
    "changed.big": 3.0,
    "changed.small": 101.0,
    "changed.int": 65,
    "changed.large_int": 10**12 + 1,  # 1e-12 relative: integers compare exactly
    "changed.type": 16.0,
    "added.key": 7,
}


def test_compare_marks_added_removed_changed_and_unchanged_keys() -> None:
    changes = golden.compare(BEFORE, AFTER)
    status = {c.key: c.status for c in changes}
    assert status == {
        "added.key": "added",
        "removed.key": "removed",
        "changed.big": "changed",
        "changed.small": "changed",
        "changed.int": "changed",
        "changed.large_int": "changed",
        "changed.type": "changed",
        "within.tolerance": "same",
        "same.float": "same",
        "same.int": "same",
    }
    # added and removed keys first, then by the size of the relative change
    order = [c.key for c in changes]
    assert order[:5] == ["added.key", "removed.key", "changed.big", "changed.int", "changed.small"]
    assert order.index("within.tolerance") < order.index("same.float")
    by_key = {c.key: c for c in changes}
    assert by_key["changed.big"].relative == pytest.approx(0.5)
    assert by_key["changed.small"].relative == pytest.approx(0.01)


def test_the_table_lists_what_differs_and_counts_the_rest() -> None:
    changes = golden.compare(BEFORE, AFTER)
    table = golden.format_table(changes)
    lines = table.splitlines()
    assert lines[0].split() == ["key", "before", "after", "change"]
    body = {line.split()[0]: line.split()[1:] for line in lines[2:-1]}
    assert body["added.key"] == ["-", "7", "added"]
    assert body["removed.key"] == ["5.0", "-", "removed"]
    assert body["changed.big"] == ["2.0", "3.0", "+50%"]
    assert body["changed.type"] == ["16", "16.0", "+0%"]
    assert "same.int" not in body and "within.tolerance" not in body
    assert lines[-1].startswith("5 changed, 1 added, 1 removed, 3 unchanged")
    assert "same.int" in golden.format_table(changes, show_same=True)
    assert golden.format_table(golden.compare(BEFORE, BEFORE)).startswith("0 changed")


def test_the_command_checks_then_rewrites_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "metrics.json"
    monkeypatch.setattr(golden, "collect", lambda: dict(AFTER))
    assert golden.main(["--file", str(path)]) == 1  # no file yet: every key is added
    assert not path.exists()
    assert golden.main(["--update", "--file", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == golden.dumps(AFTER)
    assert golden.main(["--file", str(path)]) == 0
    monkeypatch.setattr(golden, "collect", lambda: {**AFTER, "changed.big": 4.0})
    capsys.readouterr()
    assert golden.main(["--file", str(path)]) == 1
    out = capsys.readouterr().out
    assert "changed.big" in out and golden.UPDATE_COMMAND in out
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temporary file left
