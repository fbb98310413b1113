"""Typed workload spec for `rdusim serve`: which requests arrive, how long they are, the service
level objectives, and how the nodes are deployed.

```yaml
requests: 1000                                  # or duration_s
seed: 0
arrival: {process: poisson, rate: 2.0}          # req/s; or {process: trace, file: reqs.jsonl}
prompt_tokens: {dist: fixed, value: 130048}     # fixed | uniform | lognormal (absent with a trace)
output_tokens: {dist: fixed, value: 1024}
slo: {ttft_s: 30, tpot_s: 0.2}
deployment: {mode: colocated}                   # or {mode: disaggregated, prefill_nodes: 4, decode_nodes: 1}
models:                                         # optional: several models on colocated nodes
  - {name: router, model: llama-3.2-3b, share: 3}   # default mappings (rdusim.serving.models)
  - {prefill: llama31_8b_prefill, decode: llama31_8b_decode, decode_batch: 32}
residency: {pinned: [router]}                   # optional: HBM budget per socket, pinned models
```

Validated like every spec (`rdusim.spec.yamlio`): an unknown key anywhere is an error with the
nearest valid key, a key that belongs to another mode, process or distribution is an error that
says which one it belongs to, and every number is bounded so that no workload can make a run
overflow or take days. A trace file is JSON Lines, one request per line with `arrival_s`,
`prompt_tokens` and `output_tokens`, checked line by line with the line named in the error.

This module only describes and checks; `rdusim.serving.arrivals` draws the requests.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.base import Strict
from rdusim.spec.catalog import not_found_fix, package_dir
from rdusim.spec.limits import MAX_SEQ_LEN
from rdusim.spec.yamlio import (
    check_path,
    did_you_mean,
    dotted,
    line_of,
    parse_document,
    path_problem,
    read_document,
    to_plain,
    validate,
)

# A run of this many requests takes a few minutes and a few hundred MB (10,000 take about a
# second); more is refused with the count a workload would expand to.
MAX_REQUESTS = 1_000_000
MAX_TOKENS = MAX_SEQ_LEN  # a request's tokens: the limit on a sequence
MAX_DURATION_S = 1e7  # about four months of simulated time
MAX_RATE = 1e6  # requests per second
MAX_NODES = 4096
MAX_BUCKETS = 64
MAX_TRACE_BYTES = 256 << 20  # a trace of MAX_REQUESTS short lines fits
MAX_TRACE_ERRORS = 10  # problems reported from one trace file before stopping

Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Nodes = Annotated[int, Field(ge=1, le=MAX_NODES)]


class ArrivalProcess(StrEnum):
    """How request arrival times are drawn (`rdusim.serving.arrivals` holds one sampler each)."""

    POISSON = "poisson"  # exponential gaps at `rate`: the open-loop load of serving benchmarks
    CONSTANT = "constant"  # gaps of exactly 1/rate: deterministic, for hand-checked schedules
    TRACE = "trace"  # times and lengths read from a JSON Lines file


class ArrivalSpec(Strict):
    process: ArrivalProcess
    rate: float | None = Field(
        default=None, gt=0, le=MAX_RATE, allow_inf_nan=False, description="requests per second"
    )
    file: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="JSON Lines trace, relative to the workload file",
    )

    @model_validator(mode="after")
    def _fields_of(self) -> ArrivalSpec:
        if self.process == ArrivalProcess.TRACE:
            if self.file is None:
                raise ValueError("process 'trace' needs a file of requests (JSON Lines)")
            if self.rate is not None:
                raise ValueError(
                    "rate applies to processes 'poisson' and 'constant'; a trace's times are "
                    "its own"
                )
        else:
            if self.rate is None:
                raise ValueError(f"process {self.process.value!r} needs a rate (requests/s)")
            if self.file is not None:
                raise ValueError(f"file applies to process 'trace', not {self.process.value!r}")
        return self


class LengthDist(StrEnum):
    """A distribution of token counts (`rdusim.serving.arrivals` holds one sampler each)."""

    FIXED = "fixed"  # every request the same: value
    UNIFORM = "uniform"  # whole numbers from low to high, both included
    LOGNORMAL = "lognormal"  # exp(N(ln median, sigma)) rounded, at least 1, clipped at max


# The parameters each distribution needs, and those it may take.
DIST_REQUIRED: dict[LengthDist, tuple[str, ...]] = {
    LengthDist.FIXED: ("value",),
    LengthDist.UNIFORM: ("low", "high"),
    LengthDist.LOGNORMAL: ("median", "sigma"),
}
DIST_OPTIONAL: dict[LengthDist, tuple[str, ...]] = {LengthDist.LOGNORMAL: ("max",)}
DIST_PARAMS = ("value", "low", "high", "median", "sigma", "max")


class LengthSpec(Strict):
    dist: LengthDist
    value: Tokens | None = None
    low: Tokens | None = None
    high: Tokens | None = None
    median: float | None = Field(default=None, ge=1, le=MAX_TOKENS, allow_inf_nan=False)
    sigma: float | None = Field(default=None, gt=0, le=10, allow_inf_nan=False)
    max: Tokens | None = Field(default=None, description="lognormal: clip longer draws to this")

    @model_validator(mode="after")
    def _fields_of(self) -> LengthSpec:
        needed = DIST_REQUIRED[self.dist]
        allowed = needed + DIST_OPTIONAL.get(self.dist, ())
        missing = [k for k in needed if getattr(self, k) is None]
        if missing:
            raise ValueError(f"dist {self.dist.value!r} needs {' and '.join(missing)}")
        for key in DIST_PARAMS:
            if key not in allowed and getattr(self, key) is not None:
                users = [d.value for d in LengthDist if key in _allowed(d)]
                raise ValueError(
                    f"{key} applies to dist {' or '.join(map(repr, users))}, not "
                    f"{self.dist.value!r}"
                )
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        if self.median is not None and self.max is not None and self.median > self.max:
            raise ValueError(f"median ({self.median:g}) is above max ({self.max})")
        return self

    @property
    def longest(self) -> int | None:
        """The longest count a draw can give (None: unbounded, a lognormal without max)."""
        return {
            LengthDist.FIXED: self.value,
            LengthDist.UNIFORM: self.high,
            LengthDist.LOGNORMAL: self.max,
        }[self.dist]


def _allowed(dist: LengthDist) -> tuple[str, ...]:
    return DIST_REQUIRED[dist] + DIST_OPTIONAL.get(dist, ())


class SloSpec(Strict):
    """Service level objectives: a request meets them when both hold (goodput counts those)."""

    ttft_s: float = Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    tpot_s: float = Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)


class DeploymentMode(StrEnum):
    COLOCATED = "colocated"  # each node runs both graphs, one at a time
    DISAGGREGATED = "disaggregated"  # prefill nodes and decode nodes; caches move between them


class SchedulingPolicy(StrEnum):
    """What a colocated node runs next (`rdusim.serving.scheduler` holds one rule each)."""

    PREFILL_FIRST = "prefill-first"
    DECODE_FIRST = "decode-first"
    MIXED = "mixed"


class DecodeStepCost(StrEnum):
    """What one decode step costs."""

    STATIC = "static"  # the compiled graph: all its slots at its full cache length (the paper)
    OCCUPIED = "occupied"  # what-if: the occupied slots at their longest cache (dynamic shapes)


class KvLinkSpec(Strict):
    """The link a cache crosses from a prefill node to a decode node (defaults: the hardware's
    per-socket P2P figures with every socket sending its shard at once, an assumption)."""

    bandwidth: float | None = Field(
        default=None, ge=1e6, le=1e18, allow_inf_nan=False, description="bytes/s, node to node"
    )
    latency_s: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)


class BucketScheme(StrEnum):
    """Which prefill graphs a deployment compiles when it lists no lengths of its own."""

    POWERS_OF_TWO = "powers-of-two"  # 1024, 2048, ... below the mapping's seq_len, and seq_len
    PADDED = "padded"  # the mapping's seq_len alone: every prompt padded to it


# The deployment fields that belong to one mode only.
MODE_FIELDS: dict[DeploymentMode, tuple[str, ...]] = {
    DeploymentMode.COLOCATED: ("nodes", "policy", "decode_steps_per_prefill", "prefill_chunk"),
    DeploymentMode.DISAGGREGATED: ("prefill_nodes", "decode_nodes", "kv_link"),
}
DEFAULT_DECODE_STEPS_PER_PREFILL = 4


class DeploymentSpec(Strict):
    mode: DeploymentMode = DeploymentMode.COLOCATED
    nodes: Nodes | None = Field(default=None, description="colocated: nodes (default 1)")
    policy: SchedulingPolicy | None = Field(
        default=None, description="colocated: prefill-first (default), decode-first, mixed"
    )
    decode_steps_per_prefill: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="mixed: decode steps a running batch takes between two prefills",
    )
    prefill_nodes: Nodes | None = None
    decode_nodes: Nodes | None = None
    kv_link: KvLinkSpec | None = None
    prefill_buckets: list[Tokens] | BucketScheme | None = Field(
        default=None,
        description="prompt lengths of extra prefill graphs (the prefill mapping's seq_len is "
        "always one), or powers-of-two (the default) or padded (the seq_len graph alone)",
    )
    decode_step: DecodeStepCost = DecodeStepCost.STATIC
    prefill_chunk: Tokens | None = Field(
        default=None,
        description="colocated: prompt tokens of the static chunk graph a prefill runs in, one "
        "chunk between two decode steps",
    )

    @model_validator(mode="after")
    def _fields_of(self) -> DeploymentSpec:
        for mode, keys in MODE_FIELDS.items():
            if mode == self.mode:
                continue
            for key in keys:
                if getattr(self, key) is not None:
                    raise ValueError(
                        f"{key} applies to mode {mode.value!r}, not {self.mode.value!r}"
                    )
        if self.decode_steps_per_prefill is not None and self.scheduling != SchedulingPolicy.MIXED:
            raise ValueError(
                f"decode_steps_per_prefill applies to policy 'mixed', not {self.scheduling.value!r}"
            )
        buckets = self.prefill_buckets
        if isinstance(buckets, list):
            if not 1 <= len(buckets) <= MAX_BUCKETS:
                raise ValueError(f"prefill_buckets lists 1 to {MAX_BUCKETS} lengths")
            if sorted(set(buckets)) != buckets:
                raise ValueError("prefill_buckets must be increasing, each length once")
        return self

    @property
    def scheduling(self) -> SchedulingPolicy:
        return self.policy or SchedulingPolicy.PREFILL_FIRST

    @property
    def steps_per_prefill(self) -> int:
        return self.decode_steps_per_prefill or DEFAULT_DECODE_STEPS_PER_PREFILL


MAX_MODELS = 64
SetValue = str | int | float | bool


class ModelClassSpec(Strict):
    """One model a workload serves, with its share of the requests: a shipped model or model
    file (`model:`, served on the default mappings, `rdusim.serving.models`) or a pair of
    mappings (`prefill:` and `decode:`). `set` applies `--set`-style values to its mappings;
    `prompt_tokens` / `output_tokens` give its requests their own lengths."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    model: str | None = Field(default=None, min_length=1, max_length=4096)
    prefill: str | None = Field(default=None, min_length=1, max_length=4096)
    decode: str | None = Field(default=None, min_length=1, max_length=4096)
    share: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False)
    set: dict[str, SetValue] | None = Field(default=None, max_length=64)
    decode_batch: Annotated[int, Field(ge=1, le=1 << 20)] | Literal["max"] | None = Field(
        default=None, description="the decode graph's batch (its slots); `set` applies to both"
    )
    prompt_tokens: LengthSpec | None = None
    output_tokens: LengthSpec | None = None

    @model_validator(mode="after")
    def _model_or_mappings(self) -> ModelClassSpec:
        pair = (self.prefill is not None, self.decode is not None)
        if self.model is not None and any(pair):
            raise ValueError(
                "give model: (served on the default mappings) or prefill: and decode:, not both"
            )
        if self.model is None and not all(pair):
            missing = "decode" if pair[0] else "prefill" if pair[1] else "model"
            raise ValueError(
                f"give {missing}: (a model with model:, or its mappings with prefill: and decode:)"
            )
        return self

    @property
    def label(self) -> str:
        """The name its metrics go by: `name`, else the model's, else the decode mapping's."""
        text = self.name or self.model or self.decode or ""
        return (
            Path(text).stem if not self.name and ("/" in text or text.endswith(".yaml")) else text
        )

    def decode_overrides(self) -> list[str]:
        """What it sets on the decode mapping alone: its batch."""
        return [] if self.decode_batch is None else [f"batch={self.decode_batch}"]

    def overrides(self) -> list[str]:
        """Its `set:` values as `--set` strings (both mappings)."""
        return [
            f"{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in (self.set or {}).items()
        ]


class ResidencySpec(Strict):
    """Which models a node's HBM holds: `hbm_bytes` per socket for the resident models' plans
    (default: the hardware's usable HBM), `pinned` models never evicted."""

    hbm_bytes: float | None = Field(default=None, gt=0, le=1e15, allow_inf_nan=False)
    pinned: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=MAX_MODELS
    )


class WorkloadSpec(Strict):
    name: str = Field(default="", max_length=200)
    requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    duration_s: float | None = Field(
        default=None, gt=0, le=MAX_DURATION_S, allow_inf_nan=False, description="arrival window"
    )
    seed: int = Field(default=0, ge=0, lt=1 << 63)
    arrival: ArrivalSpec
    prompt_tokens: LengthSpec | None = None
    output_tokens: LengthSpec | None = None
    slo: SloSpec | None = None  # none: goodput is not applicable (reported as null, with why)
    deployment: DeploymentSpec = Field(default_factory=DeploymentSpec)
    models: list[ModelClassSpec] | None = Field(default=None, min_length=1, max_length=MAX_MODELS)
    residency: ResidencySpec | None = None

    @model_validator(mode="after")
    def _fields_of(self) -> WorkloadSpec:
        trace = self.arrival.process == ArrivalProcess.TRACE
        if self.requests is not None and self.duration_s is not None:
            raise ValueError("give requests or duration_s, not both")
        self._check_models()
        if trace:
            given = [k for k in ("prompt_tokens", "output_tokens") if getattr(self, k)]
            given += [
                f"models[{i}].{k}"
                for i, c in enumerate(self.models or [])
                for k in ("prompt_tokens", "output_tokens")
                if getattr(c, k)
            ]
            if given:
                raise ValueError(
                    f"{' and '.join(given)} come from the trace with process 'trace'; remove "
                    "them (or use another process)"
                )
        else:
            missing = [
                k
                for k in ("prompt_tokens", "output_tokens")
                if not getattr(self, k)
                and not (self.models and all(getattr(c, k) for c in self.models))
            ]
            if missing:
                raise ValueError(
                    f"give {' and '.join(missing)} (e.g. {{dist: fixed, value: 1024}})"
                )
            if (self.requests is None) == (self.duration_s is None):
                raise ValueError(
                    "give either requests (how many) or duration_s (how long they arrive for)"
                )
        return self

    def _check_models(self) -> None:
        """Model names once each, pinned models among them, many models on colocated nodes."""
        labels = self.model_labels
        twice = sorted({n for n in labels if labels.count(n) > 1})
        if twice:
            raise ValueError(
                f"models: {twice[0]!r} is named twice; give each entry its own name: (the name "
                "its metrics go by)"
            )
        if self.residency is not None:
            if not self.models:
                raise ValueError("residency applies to a workload that lists models:")
            unknown = [p for p in self.residency.pinned if p not in labels]
            if unknown:
                raise ValueError(
                    f"residency.pinned names {unknown[0]!r}, which is none of the models "
                    f"({', '.join(labels)})"
                )
        if len(labels) > 1 and self.deployment.mode != DeploymentMode.COLOCATED:
            raise ValueError(
                "several models are served on colocated nodes only (each node holds the "
                "models' graphs and switches between them); use deployment: {mode: colocated}"
            )

    @property
    def model_labels(self) -> list[str]:
        """The names of the workload's models, in order (none without `models:`)."""
        return [c.label for c in self.models or []]


@dataclass(frozen=True)
class RateProblem:
    """Why an arrival rate cannot drive a workload: the problem, its fix, and the workload key
    that sets the count (`duration_s`, or `arrival.rate` for a number of requests)."""

    problem: str
    fix: str
    key: tuple[str, ...]


def request_count_problem(
    rate: float | None, duration_s: float | None, requests: int | None
) -> RateProblem | None:
    """Why `rate` cannot drive a workload of `requests` requests or a window of `duration_s`
    seconds; None when it can. The expected count of a window must be at least one
    request and at most `MAX_REQUESTS`; a number of requests must arrive within
    `MAX_DURATION_S`, or their arrival times would not be finite numbers."""
    if rate is None:
        return None
    if duration_s is not None:
        expected = rate * duration_s
        if expected > MAX_REQUESTS:
            return RateProblem(
                f"rate {rate:g}/s x duration_s {duration_s:g} s would draw about "
                f"{expected:,.0f} requests, more than {MAX_REQUESTS:,}, rdusim's limit",
                f"use a rate of at most {MAX_REQUESTS / duration_s:.3g}/s or a shorter duration_s",
                ("duration_s",),
            )
        if expected < 1:
            return RateProblem(
                f"rate {rate:g}/s x duration_s {duration_s:g} s expects {expected:.3g} requests, "
                "fewer than one",
                f"use a rate of at least {1 / duration_s:.3g}/s or a longer duration_s",
                ("duration_s",),
            )
    if requests is not None and requests / rate > MAX_DURATION_S:
        span = requests / rate
        over = f"about {span:.3g} s" if math.isfinite(span) else "more seconds than a float holds"
        return RateProblem(
            f"{requests:,} requests at rate {rate:g}/s would arrive over {over}, more than "
            f"{MAX_DURATION_S:g} s (about four months), rdusim's limit on simulated time",
            f"use a rate of at least {requests / MAX_DURATION_S:.3g}/s or fewer requests",
            ("arrival", "rate"),
        )
    return None


class TraceRecord(Strict):
    """One line of a trace file."""

    arrival_s: float = Field(ge=0, le=MAX_DURATION_S, allow_inf_nan=False)
    prompt_tokens: Tokens
    output_tokens: Tokens
    model: str | None = Field(default=None, min_length=1, max_length=200)


@dataclass(frozen=True)
class TraceRequests:
    """The requests of a trace file, in file order (arrival times never decrease)."""

    file: str
    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    lines: tuple[int, ...]  # each request's line in the file, for errors
    models: tuple[str | None, ...] = ()  # each request's model, if the line names one


@dataclass(frozen=True)
class ResolvedWorkload:
    spec: WorkloadSpec
    file: str
    doc: Any
    trace: TraceRequests | None = None

    def line(self, *key: str | int) -> int | None:
        """The line of `key` in the workload file, to point an error at it."""
        return line_of(self.doc, key)

    def error(self, problem: str, key: tuple[str | int, ...], fix: str) -> SpecError:
        return SpecError(problem, file=self.file, key=dotted(key), line=self.line(*key), fix=fix)


# --- unknown keys ------------------------------------------------------------------------------


def _section(annotation: Any) -> type[BaseModel] | None:
    """The spec class a field holds (also inside `X | None` and `list[X]`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section(arg)
        if found is not None:
            return found
    return None


def unknown_keys(
    data: Any,
    model: type[BaseModel],
    *,
    file: str,
    doc: Any,
    path: tuple[str, ...] = (),
    what: str = "a workload",
) -> list[SpecError]:
    """Every key of `data` (recursively) that `model` has no field for, each with the nearest
    field as a suggestion and the section's fields listed."""
    if not isinstance(data, dict):
        return []
    fields = model.model_fields
    errors: list[SpecError] = []
    for key, value in data.items():
        where = (*path, str(key))
        if key not in fields:
            names = ", ".join(fields)
            section = f"{dotted(path)} takes" if path else f"{what} takes"
            errors.append(
                SpecError(
                    f"unknown key {key!r}",
                    file=file,
                    key=dotted(where),
                    line=line_of(doc, where),
                    fix=did_you_mean(str(key), fields) + f"{section}: {names}",
                )
            )
            continue
        inner = _section(fields[key].annotation)
        if inner is not None:
            errors += unknown_keys(value, inner, file=file, doc=doc, path=where, what=what)
    return errors


def _raise(errors: list[SpecError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


# --- loading -----------------------------------------------------------------------------------


def shipped_workloads() -> dict[str, Path]:
    """The example workloads that ship with rdusim (`rdusim/workloads/`), by name."""
    return {p.stem: p for p in sorted(package_dir("workloads").glob("*.yaml"))}


def resolve_workload(text: str | Path) -> str:
    """The workload file `text` names: an existing path (kept as typed), else a shipped name
    (with or without `.yaml`), else "file not found" listing the shipped names."""
    text = str(text)
    if path_problem(text) is not None or Path(text).exists():
        return text  # the reader says why the operating system refuses a name
    shipped = shipped_workloads()
    if text and Path(text).name == text and text.removesuffix(".yaml") in shipped:
        return str(shipped[text.removesuffix(".yaml")])
    raise SpecError(
        "file not found",
        file=text,
        fix=not_found_fix(
            "workload", shipped, "relative paths are taken from the current directory"
        ),
    )


def load_workload(path: str | Path) -> ResolvedWorkload:
    """Read and check a workload file (a path or a shipped name), and its trace if it names
    one."""
    file = resolve_workload(path)
    return _resolved(read_document(file), file)


def parse_workload(text: str, file: str = "<workload>") -> ResolvedWorkload:
    """A workload from YAML text (a trace file it names is taken from the current directory);
    errors name `file`."""
    return _resolved(parse_document(text, file=file), file)


def _resolved(doc: Any, file: str) -> ResolvedWorkload:
    data = to_plain(doc)
    if not isinstance(data, dict):
        raise SpecError(
            "a workload must be a set of keys",
            file=file,
            fix="write requests:, arrival:, prompt_tokens:, output_tokens:, slo: (see "
            "rdusim/workloads/)",
        )
    _raise(unknown_keys(data, WorkloadSpec, file=file, doc=doc))
    spec = validate(WorkloadSpec, data, file=file, doc=doc)
    resolved = ResolvedWorkload(spec, file, doc)
    rate = request_count_problem(spec.arrival.rate, spec.duration_s, spec.requests)
    if rate is not None:
        raise resolved.error(rate.problem, rate.key, rate.fix)
    if spec.arrival.file is not None:
        trace_path = _trace_path(resolved, spec.arrival.file)
        trace = read_trace(trace_path)
        _check_trace_models(trace, spec.model_labels)
        resolved = ResolvedWorkload(spec, file, doc, trace)
    return resolved


def _check_trace_models(trace: TraceRequests, labels: Sequence[str]) -> None:
    """Each line's `model` must name one of the workload's models; a workload of several
    models needs it on every line."""
    for i, name in enumerate(trace.models):
        if name is None and len(labels) > 1:
            problem, fix = (
                "names no model, and the workload serves several",
                f"give each line a model: one of {', '.join(labels)}",
            )
        elif name is not None and name not in (labels or []):
            problem = f"model {name!r} is not one of the workload's models"
            fix = (
                f"name one of {', '.join(labels)}"
                if labels
                else "list the models in the workload's models: (or drop model from the trace)"
            )
        else:
            continue
        raise SpecError(problem, file=trace.file, line=trace.lines[i], key="model", fix=fix)


def _trace_path(wl: ResolvedWorkload, name: str) -> Path:
    """The trace named in the workload: relative to the workload file, then the current
    directory."""
    key = ("arrival", "file")
    check_path(name, file=wl.file, key=dotted(key), line=wl.line(*key))
    base = Path(wl.file).parent
    candidates = [Path(name)] if Path(name).is_absolute() else [base / name, Path(name)]
    found = next((c for c in candidates if path_problem(c) is None and c.is_file()), None)
    if found is None:
        raise wl.error(
            f"trace file {name!r} not found",
            key,
            "give a JSON Lines file relative to the workload file (or the current directory)",
        )
    return found


def read_trace(path: str | Path) -> TraceRequests:
    """Read a JSON Lines trace: one `{arrival_s, prompt_tokens, output_tokens}` per line, arrival
    times never decreasing, blank lines ignored. Problems name the file and the line."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TRACE_BYTES + 1)
    except OSError as exc:
        raise SpecError(
            f"cannot read the trace: {exc.strerror or exc}",
            file=file,
            fix="check that the file exists and that you may read it",
        ) from None
    if len(raw) > MAX_TRACE_BYTES:
        raise SpecError(
            f"trace is larger than {MAX_TRACE_BYTES} bytes, rdusim's limit",
            file=file,
            fix=f"keep at most {MAX_REQUESTS} requests, one short JSON object per line",
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"trace is not UTF-8 text (byte offset {exc.start})",
            file=file,
            fix="save the trace as UTF-8 JSON Lines",
        ) from None
    records: list[TraceRecord] = []
    lines: list[int] = []
    errors: list[SpecError] = []
    last = 0.0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = _trace_record(line, file, number, errors)
        if record is None:
            if len(errors) >= MAX_TRACE_ERRORS:
                break
            continue
        if record.arrival_s < last:
            errors.append(
                SpecError(
                    f"arrival_s {record.arrival_s:g} is earlier than the line before ({last:g})",
                    file=file,
                    line=number,
                    key="arrival_s",
                    fix="sort the trace by arrival_s",
                )
            )
        last = max(last, record.arrival_s)
        records.append(record)
        lines.append(number)
        if len(records) > MAX_REQUESTS:
            raise SpecError(
                f"trace holds more than {MAX_REQUESTS} requests, rdusim's limit",
                file=file,
                line=number,
                fix="cut the trace, or set requests: in the workload to read only the first ones",
            )
        if len(errors) >= MAX_TRACE_ERRORS:
            break
    _raise(errors)
    if not records:
        raise SpecError(
            "trace holds no requests",
            file=file,
            fix='write one request per line: {"arrival_s": 0.0, "prompt_tokens": 4096, '
            '"output_tokens": 256}',
        )
    return TraceRequests(
        file,
        tuple(r.arrival_s for r in records),
        tuple(r.prompt_tokens for r in records),
        tuple(r.output_tokens for r in records),
        tuple(lines),
        tuple(r.model for r in records),
    )


def _trace_record(line: str, file: str, number: int, errors: list[SpecError]) -> TraceRecord | None:
    """One line as a record; a problem is appended to `errors` (with the line) instead."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        errors.append(
            SpecError(
                f"not a JSON object: {' '.join(str(exc).split())[:200]}",
                file=file,
                line=number,
                fix="write one JSON object per line",
            )
        )
        return None
    if not isinstance(data, dict):
        errors.append(
            SpecError(
                "not a JSON object",
                file=file,
                line=number,
                fix='write {"arrival_s": ..., "prompt_tokens": ..., "output_tokens": ...}',
            )
        )
        return None
    found = unknown_keys(data, TraceRecord, file=file, doc=None, what="a trace line")
    if found:
        errors += [e.located(file, number) for e in found]
        return None
    try:
        return validate(TraceRecord, data, file=file)
    except SpecError as exc:
        errors.append(exc.located(file, number))
    except SpecErrors as exc:
        errors += [e.located(file, number) for e in exc.errors]
    return None
