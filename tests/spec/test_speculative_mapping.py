"""A mapping's `speculative:` section resolved: the draft model loaded like `model:`, and every
way it can be wrong a located error naming the key (the command line's exit code 2 is checked in
tests/test_cli_map.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.spec.catalog import package_dir
from rdusim.spec.mapping import load_mapping

SPEC = [
    "batch=1",
    "seq_len=8192",
    "snapstream.enabled=false",
    "speculative.draft=llama-3.2-1b",
    "speculative.draft_tokens=4",
    "speculative.acceptance=0.8",
]


def _with(*changes: str) -> list[str]:
    keys = {c.split("=", 1)[0] for c in changes}
    return [s for s in SPEC if s.split("=", 1)[0] not in keys] + list(changes)


def test_the_draft_is_loaded_by_its_shipped_name() -> None:
    rm = load_mapping("llama31_70b_decode", SPEC)
    assert rm.draft is not None and rm.draft.name == "llama-3.2-1b"
    assert rm.draft.vocab_size == rm.model.vocab_size == 128256


def test_the_shipped_llama_3_2_1b_is_the_published_config() -> None:
    # meta-llama/Llama-3.2-1B config.json
    draft = load_mapping("llama31_70b_decode", SPEC).draft
    assert draft is not None
    assert (
        draft.hidden_size,
        draft.num_hidden_layers,
        draft.num_attention_heads,
        draft.num_key_value_heads,
        draft.intermediate_size,
        draft.vocab_size,
        draft.head_dim,
        draft.tie_word_embeddings,
    ) == (2048, 16, 32, 8, 8192, 128256, 64, True)


def _shipped_draft_text() -> str:
    return (package_dir("models") / "llama-3.2-1b.yaml").read_text(encoding="utf-8")


def test_a_draft_file_is_found_relative_to_the_mapping(tmp_path: Path) -> None:
    source = Path(load_mapping("llama31_70b_decode").source.file)
    (tmp_path / "m.yaml").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    text = _shipped_draft_text().replace("name: llama-3.2-1b", "name: mine")
    (tmp_path / "my-draft.yaml").write_text(text, "utf-8")
    rm = load_mapping(tmp_path / "m.yaml", _with("speculative.draft=my-draft.yaml"))
    assert rm.draft is not None and rm.draft.name == "mine"


def _error(mapping: str, overrides: list[str]) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_mapping(mapping, overrides)
    return info.value


def test_an_unknown_draft_is_refused() -> None:
    err = _error("llama31_70b_decode", _with("speculative.draft=llama-9b"))
    assert err.key == "speculative.draft" and "'llama-9b' not found" in err.problem
    assert err.fix and "llama-3.2-1b" in err.fix  # the shipped names


def test_a_draft_with_another_vocabulary_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "small.yaml"
    other.write_text(_shipped_draft_text().replace("vocab_size: 128256", "vocab_size: 32000"))
    err = _error("llama31_70b_decode", _with(f"speculative.draft={other}"))
    assert err.key == "speculative.draft"
    assert "32000" in err.problem and "128256" in err.problem and "tokenizer" in err.problem


def test_speculation_on_a_prefill_mapping_is_refused() -> None:
    overrides = [s for s in SPEC if s.startswith("speculative")]
    err = _error("llama31_70b_prefill", overrides)
    assert err.key == "speculative" and "decode" in err.problem


def test_mtp_and_a_draft_model_together_are_refused() -> None:
    err = _error("r1_decode", [s for s in SPEC if s.startswith("speculative")])
    assert err.key == "speculative" and "both mtp" in err.problem


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("speculative.acceptance=1.5", "speculative.acceptance"),
        ("speculative.acceptance=-0.2", "speculative.acceptance"),
        ("speculative.draft_tokens=0", "speculative.draft_tokens"),
    ],
)
def test_out_of_range_values_name_their_key(override: str, key: str) -> None:
    err = _error("llama31_70b_decode", _with(override))
    assert err.key == key
