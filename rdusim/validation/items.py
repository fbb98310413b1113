"""The evidence: every public SN40L figure, one item each, read from `validation/evidence/`.

A file holds one source (title, date, URL) and its items. An item is a published figure: what
it measures, its value and unit, how it is bounded ("up to", "over", a range), how precisely it
is printed, the configuration the source states, and what the source leaves unstated, written
as the `--set` choices rdusim would have to make. An item rdusim can compute has a `measure`: the
shipped mapping and settings that reproduce the configuration, and the metric to read.

Items the sources share a deployment with (Table 5's six cells ran on one deployment) name it,
so its unstated choices are made once for all of them. Priors on the calibrated parameters live
in `priors.yaml` beside the sources, each with its range and the fact or reasoning behind it.
Nothing outside `rdusim.validation` reads these files.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.base import Strict
from rdusim.spec.yamlio import load_model
from rdusim.uncertainty.parameters import BY_NAME

Setting = Any  # a value a `--set` path may take


class Bound(StrEnum):
    """How a published figure bounds the quantity."""

    VALUE = "value"  # the quantity, to its printed precision
    UPPER = "upper"  # at most the value ("below 3%")
    LOWER = "lower"  # at least the value ("over 90%", a rate a slower end-to-end run implies)
    RANGE = "range"  # within [low, high] ("about 2-5%")


class Use(StrEnum):
    """What the calibration does with an item."""

    FIT = "fit"  # part of the likelihood (and left out in turn by leave-one-out)
    HOLDOUT = "holdout"  # predicted by the posterior, never fitted
    DERIVED = "derived"  # follows from other items of the same source (a ratio of two cells)
    CONTEXT = "context"  # kept for the record; rdusim cannot express it yet (`reason` says why)


class Metric(StrEnum):
    """What a measure reads off its run(s)."""

    TOTAL_LATENCY_S = "total_latency_s"  # time to first token, or one decode step
    TPOT_S = "tpot_s"
    THROUGHPUT = "throughput_tokens_per_s"
    PER_USER = "tokens_per_s_per_user"  # accepted tokens per step over the step
    MAX_BATCH = "max_batch_size"
    SHARE = "share_percent"  # the named kernels' share of one layer's latency
    ROOFLINE_FRACTION = "roofline_fraction_percent"  # step at peak HBM or FLOPs over the step
    SPEEDUP = "speedup"  # total latency with `base` settings over that with `set`
    OVERHEAD = "overhead_percent"  # total latency with `set` over that with `base`, minus one
    REQUEST_LATENCY_S = "request_latency_s"  # prefill + output tokens at the decode run's TPOT
    NAIVE_INDEXING_BYTES = "naive_indexing_bytes"  # Listing 2's slices, on chip
    NAIVE_SRAM_RATIO = "naive_sram_ratio"  # Listing 2's update over the ring buffer's kernel


# metrics whose value depends on no calibrated parameter (compile-time arithmetic)
STRUCTURAL = frozenset({Metric.NAIVE_INDEXING_BYTES, Metric.NAIVE_SRAM_RATIO})


class Source(Strict):
    id: str
    title: str
    authors: str
    date: str
    url: str
    kind: str


Choices = Annotated[list[Setting], Field(min_length=1)]


class Deployment(Strict):
    """A configuration several items of a source share: the mapping, its settings, and what the
    source leaves open (each combination of the `unstated` choices is one reading)."""

    mapping: str
    set: list[str] = Field(default_factory=list)
    unstated: dict[str, Choices] = Field(default_factory=dict)
    why: str = ""


class Measure(Strict):
    """How rdusim computes an item: a run (a shipped mapping with `--set`s) and a metric.

    `deployment` (a name in the file's `deployments`) or `mapping` gives the run; `set` adds to
    it. `unstated` are this item's own open choices (readings, one of which the measurement
    was); `over` are choices the published figure is the largest over ("up to 2.2x"). A choice
    is a value for the `--set` path its key names, or, under a key that only labels the choice
    (`sockets`), a list of `--set` strings.
    """

    metric: Metric
    deployment: str | None = None
    mapping: str | None = None
    set: list[str] = Field(default_factory=list)
    unstated: dict[str, Choices] = Field(default_factory=dict)
    over: dict[str, Choices] = Field(default_factory=dict)
    base: list[str] | None = None  # SPEEDUP, OVERHEAD: the reference run's extra settings
    kernels: list[str] | None = None  # SHARE: kernels whose shares are summed
    layer: str | None = None  # SHARE: the layer kind
    prefill: str | None = None  # REQUEST_LATENCY_S: the prefill mapping
    prefill_set: list[str] = Field(default_factory=list)  # ... and its settings
    input_tokens: int | None = Field(default=None, gt=0)
    output_tokens: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _complete(self) -> Measure:
        if (self.deployment is None) == (self.mapping is None):
            raise ValueError("a measure names either a deployment or a mapping")
        needs: dict[Metric, tuple[str, ...]] = {
            Metric.SPEEDUP: ("base",),
            Metric.OVERHEAD: ("base",),
            Metric.SHARE: ("kernels", "layer"),
            Metric.REQUEST_LATENCY_S: ("prefill", "input_tokens", "output_tokens"),
        }
        missing = [f for f in needs.get(self.metric, ()) if getattr(self, f) is None]
        if missing:
            raise ValueError(f"metric {self.metric.value} needs {', '.join(missing)}")
        return self


class Item(Strict):
    id: str
    quantity: str
    where: str
    value: float | tuple[float, float]
    unit: str
    bound: Bound = Bound.VALUE
    precision: float = Field(ge=0, le=1, description="relative 1-sigma of the printed figure")
    stated: dict[str, Any] = Field(default_factory=dict)
    unstated: dict[str, Any] = Field(default_factory=dict)  # what the source leaves open
    use: Use
    reason: str | None = None  # CONTEXT: why rdusim cannot express it; others: a known miss
    note: str = ""
    measure: Measure | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Item:
        if (self.bound == Bound.RANGE) != isinstance(self.value, tuple):
            raise ValueError("a range item's value is [low, high], and only a range item's")
        if self.use in (Use.FIT, Use.HOLDOUT) and self.measure is None:
            raise ValueError(f"a {self.use.value} item needs a measure")
        if self.use == Use.CONTEXT and not self.reason:
            raise ValueError("a context item says why rdusim cannot express it (reason)")
        return self

    @property
    def low(self) -> float:
        return self.value[0] if isinstance(self.value, tuple) else self.value

    @property
    def high(self) -> float:
        return self.value[1] if isinstance(self.value, tuple) else self.value

    @property
    def central(self) -> float:
        """The figure (a range's geometric middle)."""
        return (self.low * self.high) ** 0.5


class EvidenceFile(Strict):
    source: Source
    deployments: dict[str, Deployment] = Field(default_factory=dict)
    items: list[Item]

    @model_validator(mode="after")
    def _references(self) -> EvidenceFile:
        ids = [i.id for i in self.items]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"item ids repeat: {', '.join(dup)}")
        for item in self.items:
            d = item.measure.deployment if item.measure else None
            if d is not None and d not in self.deployments:
                raise ValueError(f"item {item.id} names an unknown deployment {d!r}")
        return self


class Prior(Strict):
    """A calibrated parameter's prior: 90% of its mass in [low, high] on its free scale (log,
    or logit for fractions), normal there; `source` is the fact or reasoning behind the range."""

    low: float = Field(gt=0)
    high: float = Field(gt=0)
    source: str

    @model_validator(mode="after")
    def _ordered(self) -> Prior:
        if not self.low < self.high:
            raise ValueError("a prior's low is below its high")
        return self


class PriorsFile(Strict):
    parameters: dict[str, Prior]
    discrepancy: Prior  # the model error's log-scale standard deviation

    @model_validator(mode="after")
    def _known(self) -> PriorsFile:
        unknown = sorted(set(self.parameters) - set(BY_NAME))
        missing = sorted(set(BY_NAME) - set(self.parameters))
        if unknown or missing:
            raise ValueError(
                "priors must cover exactly the calibrated parameters"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                + (f"; missing: {', '.join(missing)}" if missing else "")
            )
        return self


PRIORS_FILE = "priors.yaml"


def evidence_dir() -> Path:
    return Path(str(resources.files("rdusim.validation").joinpath("evidence")))


class Evidence:
    """Every source and item of an evidence folder, with ids `source/item`."""

    def __init__(self, files: list[EvidenceFile], priors: PriorsFile) -> None:
        self.files = files
        self.priors = priors
        self.items: dict[str, tuple[EvidenceFile, Item]] = {
            f"{f.source.id}/{i.id}": (f, i) for f in files for i in f.items
        }

    def item(self, item_id: str) -> Item:
        return self.items[item_id][1]

    def source_of(self, item_id: str) -> Source:
        return self.items[item_id][0].source

    def deployment(self, item_id: str) -> Deployment | None:
        f, item = self.items[item_id]
        if item.measure is None or item.measure.deployment is None:
            return None
        return f.deployments[item.measure.deployment]

    def ids(self, *uses: Use) -> list[str]:
        return [k for k, (_, i) in self.items.items() if not uses or i.use in uses]

    @property
    def sources(self) -> list[Source]:
        return [f.source for f in self.files]


def load_evidence(folder: Path | None = None) -> Evidence:
    """Every `*.yaml` source in `folder` (the shipped evidence by default) and its priors."""
    folder = folder or evidence_dir()
    files: list[EvidenceFile] = []
    errors: list[SpecError] = []
    for path in sorted(folder.glob("*.yaml")):
        if path.name == PRIORS_FILE:
            continue
        try:
            f = load_model(EvidenceFile, path)
        except SpecError as exc:
            errors.append(exc)
            continue
        if f.source.id != path.stem:
            errors.append(
                SpecError(
                    f"source id {f.source.id!r} differs from the file's name",
                    file=str(path),
                    key="source.id",
                    fix=f"name the file {f.source.id}.yaml or set source.id: {path.stem}",
                )
            )
        files.append(f)
    if errors:
        raise SpecErrors(errors)
    priors = load_model(PriorsFile, folder / PRIORS_FILE)
    return Evidence(files, priors)


@cache
def shipped_evidence() -> Evidence:
    return load_evidence()
