"""Speculation: the expected accepted tokens per step against the closed form worked out by hand,
the truncated-geometric distribution they come from, and who drafts for each kind of mapping."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdusim.spec.mapping import MappingSpec
from rdusim.spec.speculation import (
    Drafter,
    Speculation,
    accepted_distribution,
    expected_accepted_tokens,
)


def closed_form(k: int, a: float) -> float:
    """(1 - a^(k+1)) / (1 - a), the geometric series' sum, with its limit k + 1 at a = 1."""
    return k + 1.0 if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def test_four_drafts_at_eighty_percent_accept_3_3616_tokens() -> None:
    # 1 + 0.8 + 0.64 + 0.512 + 0.4096, and (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2
    assert pytest.approx(3.3616, abs=1e-12) == (1.0 - 0.32768) / 0.2
    assert expected_accepted_tokens(4, 0.8) == pytest.approx(3.3616, abs=1e-12)
    assert Speculation(Drafter.MODEL, 4, 0.8).accepted_tokens == pytest.approx(3.3616, abs=1e-12)


def test_the_ends_of_the_acceptance_range() -> None:
    # nothing accepted: the target's own token only; everything accepted: k drafts and the bonus
    assert expected_accepted_tokens(4, 0.0) == 1.0
    assert expected_accepted_tokens(4, 1.0) == 5.0
    assert expected_accepted_tokens(1, 1.0) == 2.0


@given(st.integers(1, 16), st.floats(0.0, 1.0))
def test_expected_tokens_match_the_closed_form(k: int, a: float) -> None:
    got = expected_accepted_tokens(k, a)
    assert got == pytest.approx(closed_form(k, a), rel=1e-9, abs=1e-12)
    assert 1.0 <= got <= k + 1.0


@given(st.integers(1, 16), st.floats(0.0, 1.0))
def test_the_distribution_sums_to_one_and_has_the_closed_form_mean(k: int, a: float) -> None:
    pmf = accepted_distribution(k, a)
    assert len(pmf) == k + 1
    assert sum(pmf) == pytest.approx(1.0, abs=1e-12)
    mean = sum((x + 1) * p for x, p in enumerate(pmf))
    assert mean == pytest.approx(closed_form(k, a), rel=1e-9, abs=1e-12)


def test_the_distribution_by_hand() -> None:
    # k = 2, a = 0.5: a rejection first (1 token) 0.5, one draft kept then a rejection 0.25,
    # both drafts kept 0.25
    assert accepted_distribution(2, 0.5) == pytest.approx([0.5, 0.25, 0.25])


def decode(**fields: object) -> MappingSpec:
    data = {"model": "m.yaml", "phase": "decode", "seq_len": 8192, **fields}
    return MappingSpec.model_validate(data)


def test_a_draft_model_drafts_when_speculative_is_given() -> None:
    spec = decode(speculative={"draft": "llama-3.2-1b", "draft_tokens": 4, "acceptance": 0.8})
    sp = spec.speculation
    assert (sp.drafter, sp.draft, sp.draft_tokens, sp.verified_tokens) == (
        Drafter.MODEL,
        "llama-3.2-1b",
        4,
        5,
    )
    assert spec.tokens_per_step == pytest.approx(3.3616, abs=1e-12)
    assert sp.sampled


def test_mtp_is_the_model_s_own_module_drafting() -> None:
    verify = decode(mtp={"draft_tokens": 2, "acceptance": 0.8}).speculation
    assert (verify.drafter, verify.draft_runs, verify.verified_tokens) == (Drafter.MTP, 2, 3)
    assert verify.accepted_tokens == pytest.approx(1 + 0.8 + 0.64)
    assert verify.sampled
    scaled = decode(mtp={"mode": "scaled", "tokens_per_step": 2.4}).speculation
    assert (scaled.drafter, scaled.draft_runs, scaled.verified_tokens) == (Drafter.MTP, 0, 1)
    assert scaled.accepted_tokens == 2.4 and not scaled.sampled  # a factor, not a distribution


def test_no_drafter_and_prefill_accept_one_token() -> None:
    assert decode().speculation == Speculation()
    assert decode().tokens_per_step == 1.0
    prefill = MappingSpec.model_validate(
        {
            "model": "m.yaml",
            "phase": "prefill",
            "seq_len": 8192,
            "speculative": {"draft": "d", "draft_tokens": 2, "acceptance": 0.5},
        }
    )
    assert prefill.tokens_per_step == 1.0  # refused when resolved (tests/spec/test_speculative)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"draft": "d", "draft_tokens": 0, "acceptance": 0.8}, "draft_tokens"),
        ({"draft": "d", "draft_tokens": 4, "acceptance": 1.2}, "acceptance"),
        ({"draft": "d", "draft_tokens": 4, "acceptance": -0.1}, "acceptance"),
        ({"draft": "d", "draft_tokens": 4, "acceptance": math.nan}, "acceptance"),
        ({"draft_tokens": 4, "acceptance": 0.8}, "draft"),
    ],
)
def test_out_of_range_fields_are_refused(section: dict[str, object], key: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        decode(speculative=section)
    assert any(e["loc"] == ("speculative", key) for e in info.value.errors())
