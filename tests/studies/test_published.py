"""Published figures at a sweep's points: the evidence items whose shipped run a point is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rdusim.spec.catalog import shipped_mappings
from rdusim.studies.published import published_points, shipped_name
from rdusim.validation.items import evidence_dir

SETTINGS = [
    [f"seq_len={n}", f"snapstream.enabled={ss}"]
    for n in (32768, 65536, 131072)
    for ss in ("true", "false")
]


def _table5_throughputs() -> dict[tuple[int, bool], float]:
    """Table 5's throughputs read straight from the evidence file, keyed by its settings."""
    doc = yaml.safe_load((evidence_dir() / "snapstream-paper.yaml").read_text())
    out = {}
    for item in doc["items"]:
        m = item.get("measure") or {}
        if item["id"].startswith("table5-throughput"):
            sets = dict(s.split("=", 1) for s in m["set"])
            out[int(sets["seq_len"]), sets["snapstream.enabled"] == "true"] = item["value"]
    return out


def test_the_six_table5_cells_land_on_their_sweep_points() -> None:
    points = published_points("r1_decode_paper", SETTINGS, [True] * 6, "throughput_tokens_per_s")
    expected = _table5_throughputs()
    assert len(expected) == 6
    got = {}
    for p in points:
        seq, ss = SETTINGS[p.row]
        got[int(seq.split("=")[1]), ss.endswith("true")] = p.value
    assert got == expected


def test_points_that_did_not_run_or_differ_get_none() -> None:
    ok = [True, False, True, True, True, True]
    rows = {
        p.row for p in published_points("r1_decode_paper", SETTINGS, ok, "throughput_tokens_per_s")
    }
    assert 1 not in rows and 0 in rows
    # another batch is another run: no published figure
    other = [[*s, "batch=8"] for s in SETTINGS]
    assert published_points("r1_decode_paper", other, [True] * 6, "throughput_tokens_per_s") == []


def test_only_the_shipped_file_and_a_published_quantity(tmp_path: Path) -> None:
    assert published_points("r1_decode_paper", SETTINGS, [True] * 6, "sram_peak_bytes") == []
    copy = tmp_path / "r1_decode_paper.yaml"
    shutil.copy(shipped_mappings()["r1_decode_paper"], copy)
    assert shipped_name(copy) == "r1_decode_paper"  # the same bytes: the same run
    copy.write_text(copy.read_text().replace("compression: 4", "compression: 8"))
    assert shipped_name(copy) is None
    assert published_points(copy, SETTINGS, [True] * 6, "throughput_tokens_per_s") == []


@pytest.mark.parametrize("name", ["no-such-mapping", "r1_prefill"])
def test_a_file_the_evidence_does_not_run_at_these_points_has_none(name: str) -> None:
    assert published_points(name, SETTINGS, [True] * 6, "throughput_tokens_per_s") == []
