"""The published cells the shipped model is known to miss, read from the validation data that
`rdusim validate` also reads, so the suite and the command agree on them."""

from __future__ import annotations

from rdusim.validation.data import known_misses

KNOWN_MISSES: dict[tuple[str, str], str] = known_misses()
