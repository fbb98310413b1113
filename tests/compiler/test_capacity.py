"""`rdusim.compiler.capacity`: the largest power of two whose HBM plan fits (`max_batch`), and
the HBM bytes by batch that give it under any usable capacity (`hbm_by_batch`,
`largest_batch`), each against plans compiled here batch by batch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rdusim.compiler.capacity import (
    does_not_fit,
    hbm_by_batch,
    largest_batch,
    max_batch,
    remedies,
)
from rdusim.compiler.compile import compile_mapping
from rdusim.errors import InfeasibleError
from rdusim.spec.mapping import load_mapping
from rdusim.uncertainty.parameters import with_values


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@pytest.mark.parametrize(
    ("seq_len", "snapstream"), [(131072, False), (131072, True), (32768, False), (8192, True)]
)
def test_largest_power_of_two_that_fits(mappings_dir: Path, seq_len: int, snapstream: bool) -> None:
    rm = load_mapping(
        mappings_dir / "r1_decode.yaml",
        [f"seq_len={seq_len}", f"snapstream.enabled={str(snapstream).lower()}"],
    )
    batch, program = max_batch(rm)
    assert _power_of_two(batch)
    assert program.workload.batch == batch
    assert program.hbm.fits
    assert program.hbm.used <= program.hbm.capacity
    nxt = compile_mapping(rm, batch=2 * batch).hbm
    assert not nxt.fits, f"batch {2 * batch} also fits ({nxt.used:.3g} <= {nxt.capacity:.3g})"


def test_snapstream_multiplies_batch_by_compression(mappings_dir: Path) -> None:
    path = mappings_dir / "r1_decode.yaml"
    off, _ = max_batch(load_mapping(path, ["seq_len=65536", "snapstream.enabled=false"]))
    on, _ = max_batch(load_mapping(path, ["seq_len=65536", "snapstream.enabled=true"]))
    rm = load_mapping(path, ["seq_len=65536"])
    assert rm.spec.snapstream is not None
    assert on == off * rm.spec.snapstream.compression


def test_more_usable_hbm_never_lowers_the_batch(mappings_dir: Path) -> None:
    rm = load_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=131072"])
    batches = [
        max_batch(replace(rm, hardware=with_values(rm.hardware, {"hbm_usable_fraction": f})))[0]
        for f in (0.8, 0.9, 1.0)
    ]
    assert batches == sorted(batches)


def test_weights_that_do_not_fit_say_so(mappings_dir: Path) -> None:
    rm = load_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=131072"])
    tiny = replace(rm, hardware=with_values(rm.hardware, {"hbm_usable_fraction": 0.1}))
    with pytest.raises(InfeasibleError) as info:
        max_batch(tiny)
    assert info.value.key == "hardware"
    assert "deepseek-r1's weights" in str(info.value) and "do not fit" in str(info.value)
    assert "use a node with at least" in (info.value.fix or "")


def test_not_even_batch_one_fits_is_a_user_error(mappings_dir: Path) -> None:
    """The weights fit, but not with one 128K sequence's cache as well: HBM is set to hold the
    weights, the workspace and half of that cache."""
    rm = load_mapping(
        mappings_dir / "r1_decode.yaml", ["seq_len=131072", "snapstream.enabled=false"]
    )
    hbm = compile_mapping(rm, batch=1).hbm
    need = hbm.weights + hbm.workspace + 0.5 * hbm.kv_cache
    fraction = need / rm.hardware.socket.hbm.capacity_bytes
    small = replace(rm, hardware=with_values(rm.hardware, {"hbm_usable_fraction": fraction}))
    with pytest.raises(InfeasibleError) as info:
        max_batch(small)
    assert info.value.key == "batch"
    assert "not even batch 1 fits" in str(info.value) and "KV cache" in str(info.value)
    assert "enable snapstream" in (info.value.fix or "")  # it is off here


@pytest.mark.parametrize("snapstream", [True, False])
def test_fixes_offer_snapstream_only_where_it_is_off(mappings_dir: Path, snapstream: bool) -> None:
    rm = load_mapping(mappings_dir / "r1_decode.yaml", [f"snapstream.enabled={snapstream}"])
    fix = remedies(rm, "use a smaller batch", "shorten seq_len")
    assert ("enable snapstream" in fix) is not snapstream
    program = compile_mapping(rm, batch=4096)
    assert ("enable snapstream" in (does_not_fit(rm, program).fix or "")) is not snapstream


def test_remedies_joins_the_options(mappings_dir: Path) -> None:
    on = load_mapping(mappings_dir / "r1_decode.yaml")
    assert remedies(on, "a", "b", "c") == "a, b, or c"
    assert remedies(on, "a", "b") == "a or b"
    assert remedies(on, "a", "b", snapstream_helps=False) == "a or b"
    off = load_mapping(mappings_dir / "r1_decode.yaml", ["snapstream.enabled=false"])
    assert remedies(off, "a", "b") == "a, enable snapstream, or b"
    assert remedies(off, "a", "b", snapstream_helps=False) == "a or b"


# --- HBM by batch, for the max batch under other usable fractions -----------------------------


def test_max_batch_records_the_hbm_of_every_batch_it_compiled(mappings_dir: Path) -> None:
    rm = load_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=131072"])
    used: dict[int, float] = {}
    batch, _ = max_batch(rm, used)
    # every power of two up to the first that does not fit, each as compiling it alone gives
    assert sorted(used) == [2**i for i in range(batch.bit_length() + 1)]
    for b, u in used.items():
        assert u == compile_mapping(rm, batch=b).hbm.used, b
    assert largest_batch(used, compile_mapping(rm, batch=1).hbm.capacity) == batch


def test_hbm_by_batch_goes_up_to_the_first_batch_over_the_ceiling(mappings_dir: Path) -> None:
    rm = load_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=131072"])
    whole = rm.hardware.socket.hbm.capacity_bytes
    used = hbm_by_batch(rm, whole)
    top = max(used)
    assert used[top] > whole and all(u <= whole for b, u in used.items() if b < top)
    assert sorted(used) == [2**i for i in range(top.bit_length())]
    # more usable HBM than the point's holds at least as large a batch
    assert largest_batch(used, whole) >= max_batch(rm)[0]


def test_hbm_by_batch_compiles_only_the_batches_it_does_not_know(
    mappings_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rdusim.compiler.capacity as capacity

    rm = load_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=131072"])
    known: dict[int, float] = {}
    max_batch(rm, known)
    compiled: list[int] = []

    def counting(rm_, batch=None):
        compiled.append(batch)
        return compile_mapping(rm_, batch=batch)

    monkeypatch.setattr(capacity, "compile_mapping", counting)
    # the ceiling the point's usable HBM sets: everything is known already
    capacity.hbm_by_batch(rm, compile_mapping(rm, batch=1).hbm.capacity, known)
    assert compiled == []
    # a ceiling above the last known batch's bytes: the batches past it are compiled
    last = max(known)
    capacity.hbm_by_batch(rm, known[last] * 1.0001, known)
    assert compiled and compiled[0] == 2 * last


def test_largest_batch_by_hand() -> None:
    used = {1: 10.0, 2: 20.0, 4: 40.0, 8: 80.0}
    assert largest_batch(used, 9.9) == 0
    assert largest_batch(used, 10.0) == 1  # exactly the capacity fits
    assert largest_batch(used, 79.9) == 4
    assert largest_batch(used, 1e9) == 8
