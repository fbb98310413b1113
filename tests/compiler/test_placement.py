"""No kernel rdusim compiles exceeds a socket: the shipped mappings (and their batch-1 and
8-socket variants) and every candidate the auto-mapper builds fit its PCUs, PMUs and SRAM."""

from __future__ import annotations

import pytest

from rdusim.api import run_mapping
from rdusim.compiler.allocate import buffer_pmus
from rdusim.search.segments import every_candidate
from rdusim.spec.catalog import shipped_mappings
from rdusim.spec.mapping import load_mapping

VARIANTS = {
    "r1_prefill": [["seq_len=4096"]],
    "r1_decode": [[], ["batch=1", "seq_len=8192", "snapstream.enabled=false"]],
    "r1_decode_paper": [[]],
    "llama31_8b_decode": [["batch=1"], ["hardware=sn40l-8"]],
    "llama31_8b_prefill": [["seq_len=8192"]],
}


@pytest.mark.parametrize(
    ("name", "sets"), [(n, s) for n, variants in VARIANTS.items() for s in variants]
)
def test_shipped_kernels_fit_a_socket(name: str, sets: list[str]) -> None:
    run = run_mapping(name, sets, simulate_it=False, uncertainty=False)
    hw = run.mapping.hardware
    socket = hw.socket
    for lp in run.program.all_layers():
        for k in lp.kernels:
            assert k.pcus <= socket.pcus, (lp.kind, k.name, k.pcus)
            assert k.pmus <= socket.pmus, (lp.kind, k.name, k.pmus)
            assert k.sram_bytes <= socket.sram_bytes, (lp.kind, k.name, k.sram_bytes)
            for op in k.ops:
                assert op.pmus >= buffer_pmus(op, hw)
                assert op.pmus >= op.pcus * socket.staging_pmus_per_pcu - 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["moe", "dense"])
def test_every_search_candidate_fits_a_socket(kind: str) -> None:
    rm = load_mapping(shipped_mappings()["r1_decode"], ["seq_len=32768"])
    socket = rm.hardware.socket
    seen = 0
    for k in every_candidate(rm, kind, batch=16):
        seen += 1
        assert k.pcus <= socket.pcus and k.pmus <= socket.pmus and k.sram_bytes <= socket.sram_bytes
        # the PMUs follow the working PCUs' staging, not the SRAM bytes alone
        assert k.pmus >= k.pcus * socket.staging_pmus_per_pcu - 1e-9
    assert seen > 10
