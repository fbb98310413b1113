"""How many decode steps a request takes when each step's accepted tokens are a random draw.

With k drafts verified per step at per-draft acceptance a (MTP in `verify` mode, or a draft
model: `rdusim.spec.speculation`), a step adds 1 + min(k, G) tokens to a sequence, G geometric
with P(G = j) = a^j (1 - a): the truncated geometric distribution whose mean is the
`tokens_per_step` a mapping reports. Serving draws it per step and sequence instead of using
the mean, so two requests of one length may take different numbers of steps, as they do on a
real deployment. A request's tokens after its first (the prefill's) take as many steps as its
draws need to reach them; the last step may accept more than was left (the request stops).

Randomness: the draws come from their own stream of the workload's seed, `SeedSequence(seed,
spawn_key=(3,))` — a fourth stream beside the three the arrivals use (`rdusim.serving.arrivals`)
— and are made for every request before the run, in request-id order. So a request's steps
depend on the seed and the requests' lengths only, not on the arrival rate, the deployment or
the schedule (common random numbers), and the same seed gives the same run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rdusim.spec.speculation import expected_accepted_tokens

ACCEPTANCE_STREAM = 3  # the workload seed's streams 0-2 are arrivals, prompts and outputs
LEAST_DRAWS = 8  # draws taken for a request beyond 1.25x its expected steps
CHUNK_DRAWS = 1 << 20  # draws made at once at most (bounds the memory of a long run)


def acceptance_rng(seed: int, stream: int = 0) -> np.random.Generator:
    """The stream the accepted-token draws of a run come from (`stream`: the model's index in a
    many-model workload; the first model's stream is the single-model run's)."""
    key = (ACCEPTANCE_STREAM,) if stream == 0 else (ACCEPTANCE_STREAM, stream)
    seq = np.random.SeedSequence(seed, spawn_key=key)
    return np.random.Generator(np.random.PCG64(seq))


def draw_accepted(
    draft_tokens: int, acceptance: float, rng: np.random.Generator, size: int
) -> np.ndarray:
    """Tokens each of `size` steps adds to one sequence: 1 + min(k, G), G ~ geometric(a)."""
    return _accepted(draft_tokens, acceptance, rng, size).astype(np.int64)


# numpy's Generator.geometric(p) draws by a search over one uniform when p >= 1/3, else by
# inversion of one standard exponential (numpy/random/src/distributions/distributions.c)
SEARCH_FROM = 0.333333333333333333333333


def _accepted(k: int, a: float, rng: np.random.Generator, size: int) -> np.ndarray:
    """`draw_accepted`'s draws as float64 (exact small integers), from the same numbers of
    `rng`'s stream numpy's geometric(1 - a) takes, truncated at k + 1 the way it computes them:
    only the k + 1 outcomes matter, so the uniform or exponential is compared with their
    thresholds instead of searched or divided to the end (twice as fast, the same values;
    `tests/serving/test_acceptance.py` checks them against `rng.geometric`)."""
    if a >= 1.0:
        return np.full(size, k + 1.0)
    if a <= 0.0:
        return np.ones(size)
    p = 1.0 - a
    if p >= SEARCH_FROM:  # N = 1 + how many of the running sums p, p + pq, ... U exceeds
        u = rng.random(size)
        out = np.ones(size)
        q = 1.0 - p
        total = prod = p
        for _ in range(k):
            out += u > total
            prod *= q
            total += prod
        return out
    # N = ceil(-E / log1p(-p)), E ~ standard exponential; min(N, k + 1)
    x = rng.standard_exponential(size)
    x /= -math.log1p(-p)
    np.ceil(x, out=x)
    return np.minimum(x, k + 1.0, out=x)


def sampled_steps(
    tokens: int, draft_tokens: int, acceptance: float, rng: np.random.Generator
) -> int:
    """Decode steps until `tokens` tokens are accepted, each step's count drawn (0 for none)."""
    if tokens <= 0:
        return 0
    mean = expected_accepted_tokens(draft_tokens, acceptance)
    steps, done = 0, 0
    while True:
        want = max(LEAST_DRAWS, math.ceil(1.25 * (tokens - done) / mean))
        totals = done + np.cumsum(_accepted(draft_tokens, acceptance, rng, want))
        i = int(np.searchsorted(totals, tokens))  # the first step that reaches `tokens`
        if i < len(totals):
            return steps + i + 1
        steps, done = steps + len(totals), int(totals[-1])


def drawn_steps(
    tokens: Sequence[int] | np.ndarray,
    draft_tokens: int,
    acceptance: float,
    seed: int,
    stream: int = 0,
) -> np.ndarray:
    """Decode steps of each of several requests (`tokens`: each one's tokens after its first, in
    request-id order), drawn from the seed's acceptance stream: each request takes a block of
    1.25x its expected steps (and `LEAST_DRAWS`) of consecutive draws, and goes on drawing in
    the rare case its block falls short."""
    rng = acceptance_rng(seed, stream)
    need = np.asarray(tokens, dtype=np.int64)
    mean = expected_accepted_tokens(draft_tokens, acceptance)
    blocks = np.where(need > 0, np.ceil(1.25 * need / mean).astype(np.int64) + LEAST_DRAWS, 0)
    out = np.zeros(len(need), dtype=np.int64)
    reach = np.cumsum(blocks)  # draws up to each request's block's end
    start = 0
    while start < len(need):
        base = int(reach[start - 1]) if start else 0  # a chunk: whole blocks, <= CHUNK_DRAWS
        stop = max(start + 1, int(np.searchsorted(reach, base + CHUNK_DRAWS, "right")))
        block, want = blocks[start:stop], need[start:stop]
        totals = np.cumsum(_accepted(draft_tokens, acceptance, rng, int(block.sum())))
        ends = np.cumsum(block)  # each request's block is totals[ends - block : ends]
        starts = ends - block
        before = np.zeros(len(block))  # accepted before its block
        after = starts > 0
        before[after] = totals[starts[after] - 1]
        first = np.searchsorted(totals, before + want)  # the draw that reaches its tokens
        short = (first >= ends) & (want > 0)
        out[start:stop] = np.where(want > 0, first - starts + 1, 0)
        for i in np.flatnonzero(short):  # the block fell short: draw on from the stream
            got = int(totals[ends[i] - 1] - before[i])
            out[start + i] = block[i] + sampled_steps(
                int(want[i]) - got, draft_tokens, acceptance, rng
            )
        start = stop
    return out
