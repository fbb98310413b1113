"""The evidence items the shipped model is known to miss, read from the evidence itself: a fitted
or held-out item with a `reason` is a known miss (`rdusim validate` reads the same field), so the
suite and the command agree on them. Keys are evidence ids, `source/item`."""

from __future__ import annotations

from rdusim.validation.items import Evidence, Use, shipped_evidence


def known_misses(evidence: Evidence | None = None) -> dict[str, str]:
    """Evidence id -> why the model misses it, for every predicted item that gives a reason."""
    evidence = evidence or shipped_evidence()
    out: dict[str, str] = {}
    for item_id in evidence.ids(Use.FIT, Use.HOLDOUT):
        reason = evidence.item(item_id).reason
        if reason:
            out[item_id] = reason
    return out


KNOWN_MISSES: dict[str, str] = known_misses()
