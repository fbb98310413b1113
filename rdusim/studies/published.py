"""Published figures that a sweep's points reproduce, for its plot to draw beside its lines.

An evidence item (`rdusim.validation.evidence`) names the shipped run behind it: a mapping and
its `--set`s. A sweep point is that run when the swept file is the shipped mapping (the same
bytes) and the point's settings give the same mapping spec as the item's. Only items whose value
is the plotted quantity itself, in its unit, are drawn: a throughput in tokens/s, a max batch,
a step or TTFT in seconds; a bound ("over 250 tokens/s") or a ratio is not a point on the line.
Nothing here produces a result: the published value is only drawn, never used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdusim.errors import RdusimError
from rdusim.spec.catalog import resolve_mapping, shipped_mappings
from rdusim.spec.mapping import load_mapping
from rdusim.validation.items import Bound, Evidence, Metric, Use, shipped_evidence
from rdusim.validation.measures import shipped_runs

# The metrics a sweep column and an evidence item share, each with the units it is published in.
PLOTTABLE: dict[Metric, frozenset[str]] = {
    Metric.THROUGHPUT: frozenset({"tokens/s"}),
    Metric.MAX_BATCH: frozenset({"seqs"}),
    Metric.TOTAL_LATENCY_S: frozenset({"s"}),
    Metric.TPOT_S: frozenset({"s"}),
}


@dataclass(frozen=True)
class PublishedPoint:
    """A published figure at a sweep row: the row's index, the item and its value."""

    row: int
    item: str
    value: float


def shipped_name(mapping: str | Path) -> str | None:
    """The shipped mapping the file is, byte for byte (a copy edited is no longer the one the
    evidence ran); None for any other file."""
    try:
        path = Path(resolve_mapping(mapping))
    except RdusimError:
        return None
    for name, shipped in shipped_mappings().items():
        if shipped.read_bytes() == path.read_bytes():
            return name
    return None


def published_points(
    mapping: str | Path,
    overrides: Sequence[Sequence[str]],
    ok: Sequence[bool],
    y: str,
    evidence: Evidence | None = None,
) -> list[PublishedPoint]:
    """The published figures of `y` at the sweep's points (`overrides`: each point's `--set`s,
    in row order; `ok`: whether it ran)."""
    if y not in {m.value for m in PLOTTABLE}:
        return []
    name = shipped_name(mapping)
    if name is None:
        return []
    ev = evidence if evidence is not None else shipped_evidence()
    metric = Metric(y)
    specs: dict[int, Any] = {}
    out: list[PublishedPoint] = []
    for item_id in ev.ids(Use.FIT, Use.HOLDOUT, Use.DERIVED):
        item = ev.item(item_id)
        m = item.measure
        if m is None or m.metric != metric or item.bound != Bound.VALUE:
            continue
        if item.unit not in PLOTTABLE[metric]:
            continue
        runs = shipped_runs(ev, item_id)
        if len(runs) != 1 or runs[0]["mapping"] != name:
            continue
        target = _spec(mapping, runs[0]["set"])
        for i, sets in enumerate(overrides):
            if not ok[i]:
                continue
            if i not in specs:
                specs[i] = _spec(mapping, list(sets))
            if target is not None and specs[i] == target:
                out.append(PublishedPoint(i, item_id, float(item.central)))
    return out


def _spec(mapping: str | Path, sets: list[str]) -> dict[str, Any] | None:
    """The mapping spec a run compiles, as data (None if the settings do not load)."""
    try:
        return load_mapping(mapping, sets).spec.model_dump(mode="json")
    except RdusimError:
        return None
