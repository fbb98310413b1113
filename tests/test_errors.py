"""User-facing errors keep what they say when they are located."""

from __future__ import annotations

from rdusim.errors import InfeasibleError, SpecError


def test_a_located_error_keeps_its_class_and_what_it_says() -> None:
    e = InfeasibleError("over the PCUs", key="kernels.moe[0]", fix="split it", limit="PCUs")
    located = e.located(file="m.yaml", line=7)
    assert type(located) is InfeasibleError
    assert (located.file, located.line, located.key, located.fix, located.limit) == (
        "m.yaml",
        7,
        "kernels.moe[0]",
        "split it",
        "PCUs",
    )
    plain = SpecError("bad", file="a.yaml").located(file="b.yaml", line=3)
    assert (type(plain), plain.file, plain.line) == (SpecError, "a.yaml", 3)
