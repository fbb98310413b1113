"""A mapping that names a reference is reported with every field in which the run differs."""

from __future__ import annotations

from rdusim.api import run_mapping


def _differences(report: dict) -> dict[str, tuple[object, object]]:
    ref = report["reference"]
    return {d["key"]: (d["this"], d["reference"]) for d in ref["differences"]}


def test_r1_decode_lists_how_it_differs_from_the_papers_deployment() -> None:
    r = run_mapping("r1_decode", uncertainty=False).report
    assert r["reference"]["mapping"] == "r1_decode_paper"
    diff = _differences(r)
    assert diff["mtp.mode"] == ("verify", "scaled")
    assert diff["moe.expert_loading"] == ("touched", "all")
    assert diff["mtp.draft_tokens"] == (2, 0)
    assert "kernels" not in diff and "orchestration" not in diff  # the same in both


def test_a_set_that_matches_the_reference_removes_the_difference() -> None:
    r = run_mapping("r1_decode", ["moe.expert_loading=all"], uncertainty=False).report
    assert "moe.expert_loading" not in _differences(r)


def test_a_mapping_without_a_reference_has_none() -> None:
    assert "reference" not in run_mapping("r1_prefill", ["seq_len=4096"], uncertainty=False).report
