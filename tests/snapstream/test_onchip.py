"""On-chip bytes of the decode-step cache update, naive (paper Listing 2) vs ring buffer, against
closed forms from DeepSeek-R1's cache widths."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.compiler.compile import compile_mapping
from rdusim.snapstream.onchip import CacheUpdate, decode_update_sram
from rdusim.spec.mapping import load_mapping

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"

BF16 = 2
LATENT, ROPE = 512, 64  # R1's cached latent and rope key per position
KEY_ROW = LATENT + ROPE  # Listing 2's keys: latent + rope key (576)
VALUE_ROW = LATENT  # its values: the latent again (512)
SEQ_LEN, SLOTS, BATCH, SOCKETS = 131072, 32768, 64, 16  # 128K prompt, 4x compressed cache


@pytest.fixture(scope="module")
def update():
    program = compile_mapping(load_mapping(MAPPINGS / "r1_decode.yaml", [f"batch={BATCH}"]))
    assert (program.seq_len, program.kv_len) == (SEQ_LEN, SLOTS)
    return program, decode_update_sram(program)


def test_each_socket_updates_its_own_sequences(update):
    _, sram = update
    assert sram["sequences_per_socket"] == BATCH // SOCKETS  # attention dp16 over the batch


def test_naive_indexing_materialises_every_slot_but_one(update):
    """Sink, top-K and the recent window without its oldest entry: slots - 1 rows of keys and
    values per sequence."""
    _, sram = update
    seqs = BATCH // SOCKETS
    assert sram["naive_indexing"] == seqs * (SLOTS - 1) * (KEY_ROW + VALUE_ROW) * BF16


def test_naive_update_adds_the_slices_and_their_concatenation_to_the_ring_kernel(update):
    program, sram = update
    seqs = BATCH // SOCKETS
    mla = next(k for k in program.layers["moe"].kernels if k.name == "MLA")
    assert sram["kernel"] == "MLA" and sram["ring"] == mla.sram_bytes
    sliced = seqs * (SLOTS - 1) * (KEY_ROW + VALUE_ROW) * BF16
    concat = seqs * SLOTS * (KEY_ROW + VALUE_ROW) * BF16
    assert sram["naive"] == pytest.approx(mla.sram_bytes + sliced + concat, rel=1e-12)
    assert sram["ratio"] == pytest.approx(sram["naive"] / mla.sram_bytes, rel=1e-12)


def test_the_program_states_its_cache_update(update):
    """The compiler finds the cache-writing kernel and the cache rows by role: MLA's latent is
    read as keys and as values, its rope key as keys only."""
    program, _ = update
    u = program.cache_update
    assert (u.kernel, u.sequences_per_socket, u.slots) == ("MLA", BATCH // SOCKETS, SLOTS)
    assert (u.key_row_bytes, u.value_row_bytes) == (KEY_ROW * BF16, VALUE_ROW * BF16)


def test_gqa_keys_and_values_are_the_k_and_v_caches():
    program = compile_mapping(load_mapping(MAPPINGS / "llama31_8b_decode.yaml"))
    row = 8 * 128 * BF16  # Llama-3.1-8B: 8 KV heads of 128
    u = program.cache_update
    assert (u.key_row_bytes, u.value_row_bytes) == (row, row)


def test_the_arithmetic_needs_only_the_sizes():
    """Anything that states its cache update will do: SnapStream needs nothing from the
    compiler."""

    class Sizes:
        cache_update = CacheUpdate("K", 100.0, 2, 10, 6.0, 4.0)

    sram = decode_update_sram(Sizes())
    assert sram["naive_indexing"] == 2 * 9 * 10.0
    assert sram["naive"] == 100.0 + 2 * 9 * 10.0 + 2 * 10 * 10.0
    assert (sram["ring"], sram["kernel"], sram["sequences_per_socket"]) == (100.0, "K", 2)
