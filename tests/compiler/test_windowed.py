"""A sliding window bounds what prefill attention re-reads and what its cache keeps in HBM
(Mistral-7B-v0.1: a 4096-key window)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rdusim.compiler.compile import compile_mapping
from rdusim.spec.mapping import load_mapping

CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "mistral-7b-v0.1.json"
WINDOW, S, BLOCK = 4096, 32768, 4096
KV_ROW = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, BF16


def prefill(tmp_path: Path, window_block: int | None):
    tiling = f"tiling: {{kv_block: {window_block}}}" if window_block else "tiling: {}"
    text = f"""
model: {CONFIG}
phase: prefill
seq_len: {S}
kernels:
  dense:
    - name: Pre
      ops: [attn_norm, q_proj, k_proj, v_proj, "rope_*", kv_cache_write]
      sharding: {{tp: 8}}
    - name: MHA
      ops: [attention]
      sharding: {{tp: 8}}
      {tiling}
    - name: Post
      ops: [o_proj, attn_residual, "ffn_*"]
      sharding: {{tp: 8}}
"""
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return compile_mapping(load_mapping(path))


def test_windowed_flash_attention_rereads_only_blocks_within_reach(tmp_path):
    """Query block i reads min(i, ceil(W/B) + 1) K/V blocks: 1 + 2 x 7 = 15 of 8 blocks' worth."""
    program = prefill(tmp_path, BLOCK)
    mha = program.layers["dense"].kernels[1].op("attention")
    nb = S // BLOCK
    reach = math.ceil(WINDOW / BLOCK) + 1
    reads = sum(min(i, reach) for i in range(1, nb + 1))
    assert reads == 15
    kv_per_socket = S * KV_ROW / 8  # one KV head per socket at tp 8
    q_per_socket = S * 32 * 128 * 2 / 8
    expected = q_per_socket + kv_per_socket + kv_per_socket * (reads / nb - 1)
    assert mha.hbm_read == pytest.approx(expected, rel=1e-12)


def test_prefill_keeps_only_the_window_of_its_cache(tmp_path):
    program = prefill(tmp_path, None)
    layers = program.layers["dense"].count
    assert program.hbm.kv_cache == pytest.approx(layers * WINDOW * KV_ROW / 16, rel=1e-12)
