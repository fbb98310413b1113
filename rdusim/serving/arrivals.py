"""Requests from a workload spec: arrival times and token counts, drawn through registries.

Each arrival process and each length distribution is one sampler in a registry keyed by its
enum (`ARRIVALS`, `LENGTHS`), so adding one is a function and an enum member, not another branch.

Randomness: the workload's seed feeds a `numpy.random.SeedSequence` that is split into three
independent streams, for arrival gaps, prompt lengths and output lengths. Changing the arrival
rate (`--rate`) therefore changes the times but not the lengths, and a run with SnapStream sees
exactly the requests of the run without it (common random numbers: the comparison measures the
deployment, not the dice).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rdusim.spec.workload import (
    MAX_REQUESTS,
    ArrivalProcess,
    LengthDist,
    LengthSpec,
    ResolvedWorkload,
    TraceRequests,
    WorkloadSpec,
)


@dataclass(frozen=True, slots=True)
class Request:
    """One request: when it arrives, its prompt, and how many tokens it generates."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    model: int = 0  # which of the workload's models it asks for (an index into `models:`)


@dataclass(frozen=True)
class Requests:
    """Many requests as columns (request i: `id[i]`, `arrival_s[i]`, ...), in the order given;
    a million of them take tens of megabytes, not hundreds as `Request` objects."""

    id: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    model: np.ndarray

    @classmethod
    def of(cls, requests: Sequence[Request]) -> Requests:
        return cls(
            np.array([r.id for r in requests], dtype=np.int64),
            np.array([r.arrival_s for r in requests], dtype=np.float64),
            np.array([r.prompt_tokens for r in requests], dtype=np.int64),
            np.array([r.output_tokens for r in requests], dtype=np.int64),
            np.array([r.model for r in requests], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.id)

    def request(self, i: int) -> Request:
        """Request i as an object."""
        return Request(
            int(self.id[i]),
            float(self.arrival_s[i]),
            int(self.prompt_tokens[i]),
            int(self.output_tokens[i]),
            int(self.model[i]),
        )

    def where(self, keep: np.ndarray) -> Requests:
        """The requests `keep` (a mask or indices) selects, in order."""
        return Requests(
            self.id[keep],
            self.arrival_s[keep],
            self.prompt_tokens[keep],
            self.output_tokens[keep],
            self.model[keep],
        )

    def objects(self) -> list[Request]:
        columns = (self.id, self.arrival_s, self.prompt_tokens, self.output_tokens, self.model)
        return [Request(*row) for row in zip(*(c.tolist() for c in columns), strict=True)]


@dataclass(frozen=True)
class Count:
    """How many arrivals to draw: a number of requests, or all that fall in a window."""

    requests: int | None
    duration_s: float | None


ArrivalSampler = Callable[[float, Count, np.random.Generator], np.ndarray]
LengthSampler = Callable[[LengthSpec, int, np.random.Generator], np.ndarray]


def _poisson(rate: float, count: Count, rng: np.random.Generator) -> np.ndarray:
    """Exponential gaps of mean 1/rate; the first request arrives one gap after 0."""
    if count.requests is not None:
        return np.cumsum(rng.exponential(1.0 / rate, count.requests))
    assert count.duration_s is not None
    times = np.empty(0)
    start = 0.0
    while True:
        # enough gaps to pass the window with overwhelming probability, topped up if not
        expected = rate * (count.duration_s - start)
        n = min(MAX_REQUESTS, max(16, math.ceil(expected + 8 * math.sqrt(expected) + 16)))
        more = start + np.cumsum(rng.exponential(1.0 / rate, n))
        times = np.concatenate([times, more])
        if more[-1] >= count.duration_s or len(times) > MAX_REQUESTS:
            break
        start = float(more[-1])
    return times[times < count.duration_s][:MAX_REQUESTS]


def _constant(rate: float, count: Count, rng: np.random.Generator) -> np.ndarray:
    """Exactly 1/rate apart, the first at 0."""
    del rng
    if count.requests is not None:
        n = count.requests
    else:
        assert count.duration_s is not None
        n = min(MAX_REQUESTS, math.ceil(count.duration_s * rate - 1e-9))
    return np.arange(n, dtype=float) / rate


ARRIVALS: dict[ArrivalProcess, ArrivalSampler] = {
    ArrivalProcess.POISSON: _poisson,
    ArrivalProcess.CONSTANT: _constant,
}


def _fixed(spec: LengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    del rng
    assert spec.value is not None
    return np.full(n, spec.value, dtype=np.int64)


def _uniform(spec: LengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    assert spec.low is not None and spec.high is not None
    return rng.integers(spec.low, spec.high, size=n, endpoint=True, dtype=np.int64)


def _lognormal(spec: LengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    assert spec.median is not None and spec.sigma is not None
    draws = rng.lognormal(math.log(spec.median), spec.sigma, size=n)
    upper = float(spec.max) if spec.max is not None else float(1 << 24)
    return np.clip(np.rint(draws), 1, upper).astype(np.int64)


LENGTHS: dict[LengthDist, LengthSampler] = {
    LengthDist.FIXED: _fixed,
    LengthDist.UNIFORM: _uniform,
    LengthDist.LOGNORMAL: _lognormal,
}


def _streams(seed: int, count: int) -> list[np.random.Generator]:
    """`count` independent streams of the seed (the first ones are the same whatever `count`)."""
    return [
        np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(count)
    ]


def requests_of(workload: ResolvedWorkload, rate: float | None = None) -> list[Request]:
    """The workload's requests in arrival order (`rate` replaces the spec's arrival rate),
    as objects (`request_columns`)."""
    return request_columns(workload, rate).objects()


def request_columns(workload: ResolvedWorkload, rate: float | None = None) -> Requests:
    """The workload's requests in arrival order (`rate` replaces the spec's arrival rate).

    With several models, a fourth stream draws each request's model in proportion to the
    shares, and a model with lengths of its own draws them from two streams of its own (so
    adding a model leaves the other streams as they were)."""
    spec = workload.spec
    if workload.trace is not None:
        return Requests.of(_from_trace(workload.trace, spec))
    classes = spec.models or []
    arrival_rng, prompt_rng, output_rng, model_rng, *own = _streams(spec.seed, 4 + 2 * len(classes))
    sampler = ARRIVALS[spec.arrival.process]
    use_rate = rate if rate is not None else spec.arrival.rate
    assert use_rate is not None
    times = sampler(use_rate, Count(spec.requests, spec.duration_s), arrival_rng)
    n = len(times)
    models = np.zeros(n, dtype=np.int64)
    if len(classes) > 1:
        shares = np.array([c.share for c in classes], dtype=float)
        models = model_rng.choice(len(classes), size=n, p=shares / shares.sum())
    prompts = _lengths(
        spec.prompt_tokens, [c.prompt_tokens for c in classes], models, prompt_rng, own[0::2]
    )
    outputs = _lengths(
        spec.output_tokens, [c.output_tokens for c in classes], models, output_rng, own[1::2]
    )
    return Requests(
        np.arange(n, dtype=np.int64),
        np.asarray(times, dtype=np.float64),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        np.asarray(models, dtype=np.int64),
    )


def _lengths(
    common: LengthSpec | None,
    own: list[LengthSpec | None],
    models: np.ndarray,
    rng: np.random.Generator,
    own_rngs: list[np.random.Generator],
) -> np.ndarray:
    """Each request's length: from the workload's distribution, or its model's own."""
    n = len(models)
    out = LENGTHS[common.dist](common, n, rng) if common is not None else np.ones(n, np.int64)
    for m, spec in enumerate(own):
        if spec is not None:
            drawn = LENGTHS[spec.dist](spec, n, own_rngs[m])
            out = np.where(models == m, drawn, out)
    return out


def _from_trace(trace: TraceRequests, spec: WorkloadSpec) -> list[Request]:
    """The trace's requests, cut to the first `requests` or to those inside `duration_s`."""
    rows = zip(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, strict=True)
    labels = spec.model_labels
    names = trace.models or (None,) * len(trace.arrival_s)
    out = []
    for i, (t, p, o) in enumerate(rows):
        if spec.requests is not None and i >= spec.requests:
            break
        if spec.duration_s is not None and t >= spec.duration_s:
            break
        name = names[i]
        out.append(Request(i, t, p, o, labels.index(name) if name is not None else 0))
    return out
