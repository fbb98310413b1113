"""How many decode steps a request takes when each step's accepted tokens are a random draw.

With k drafts verified per step at per-draft acceptance a (MTP in `verify` mode, or a draft
model: `rdusim.spec.speculation`), a step adds 1 + min(k, G) tokens to a sequence, G geometric
with P(G = j) = a^j (1 - a): the truncated geometric distribution whose mean is the
`tokens_per_step` a mapping reports. Serving draws it per step and sequence instead of using
the mean, so two requests of one length may take different numbers of steps, as they do on a
real deployment.

Randomness: each request's draws come from its own stream, `SeedSequence(seed, spawn_key=(3,
id))` — a fourth stream beside the three the arrivals use (`rdusim.serving.arrivals`) — so a
request's steps depend on the workload's seed and its id only, not on the arrival rate, the
deployment or the other requests (common random numbers), and the same seed gives the same run.
"""

from __future__ import annotations

import math

import numpy as np

from rdusim.spec.speculation import expected_accepted_tokens

ACCEPTANCE_STREAM = 3  # the workload seed's streams 0-2 are arrivals, prompts and outputs
LEAST_DRAWS = 8  # draws taken at a time at least


def request_rng(seed: int, request_id: int) -> np.random.Generator:
    """The acceptance draws' stream of one request."""
    seq = np.random.SeedSequence(seed, spawn_key=(ACCEPTANCE_STREAM, request_id))
    return np.random.Generator(np.random.PCG64(seq))


def draw_accepted(
    draft_tokens: int, acceptance: float, rng: np.random.Generator, size: int
) -> np.ndarray:
    """Tokens each of `size` steps adds to one sequence: 1 + min(k, G), G ~ geometric(a)."""
    k, a = draft_tokens, acceptance
    if a >= 1.0:
        return np.full(size, k + 1, dtype=np.int64)
    if a <= 0.0:
        return np.ones(size, dtype=np.int64)
    # numpy's geometric counts trials up to the first success, P(N = n) = a^(n-1) (1 - a):
    # that is 1 + G for a rejection of probability 1 - a
    return np.minimum(rng.geometric(1.0 - a, size), k + 1)


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
        totals = done + np.cumsum(draw_accepted(draft_tokens, acceptance, rng, want))
        i = int(np.searchsorted(totals, tokens))  # the first step that reaches `tokens`
        if i < len(totals):
            return steps + i + 1
        steps, done = steps + len(totals), int(totals[-1])
