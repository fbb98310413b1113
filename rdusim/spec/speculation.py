"""What a decode step speculates: who drafts, how many drafts, how often one is accepted.

Speculative decoding (Leviathan et al., "Fast Inference from Transformers via Speculative
Decoding", arXiv 2211.17192; Chen et al., arXiv 2302.01318): a cheap drafter proposes k tokens
one after another, the target model verifies all k + 1 positions of every sequence in one step,
and keeps the drafts up to the first one it rejects, plus one token of its own (the correction,
or the bonus token when every draft is kept). With each draft accepted independently with
probability a, the drafts kept in a step are min(k, G) for G geometric (P(G = j) = a^j (1 - a)),
so the tokens a step adds per sequence follow the truncated geometric distribution

    P(X = j + 1) = a^j (1 - a)  for j < k,     P(X = k + 1) = a^k,

whose mean is sum_{i=0..k} a^i = (1 - a^(k+1)) / (1 - a) (k + 1 at a = 1).

Two drafters share this one description, so one code path computes the accepted tokens and one
composes the step (`rdusim.compiler.compile`): DeepSeek's multi-token-prediction module (`mtp:`
in a mapping) and a separate, co-resident draft model (`speculative:`). A step of either runs the
drafter k times and verifies k + 1 tokens per sequence through the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Drafter(StrEnum):
    """Who proposes the draft tokens of a decode step."""

    NONE = "none"  # a plain step: one token per sequence
    MTP = "mtp"  # the model's own multi-token-prediction module(s) (DeepSeek-V3/R1)
    MODEL = "model"  # a separate draft model held beside the target


def expected_accepted_tokens(draft_tokens: int, acceptance: float) -> float:
    """Expected tokens a step adds per sequence: sum_{i=0..k} a^i, which is
    (1 - a^(k+1)) / (1 - a) and k + 1 at a = 1 (summed, so a = 1 needs no special case)."""
    return sum(acceptance**i for i in range(draft_tokens + 1))


def accepted_distribution(draft_tokens: int, acceptance: float) -> list[float]:
    """P(X = x) for x = 1 .. k + 1 tokens added per sequence in a step (index x - 1)."""
    k, a = draft_tokens, acceptance
    return [a**j * (1 - a) for j in range(k)] + [a**k]


@dataclass(frozen=True)
class Speculation:
    """One decode step's speculation: the drafter, k drafts at per-draft acceptance a.

    `reported` is set only for a plain step whose throughput a source reports multiplied by a
    factor (`mtp: {mode: scaled}`): no draft is run or verified, and the factor stands in for
    the accepted tokens."""

    drafter: Drafter = Drafter.NONE
    draft_tokens: int = 0
    acceptance: float = 1.0
    draft: str | None = None  # the draft model's name or file (drafter `model`)
    reported: float | None = None

    @property
    def verified_tokens(self) -> int:
        """Tokens per sequence the target processes in one step: k + 1."""
        return self.draft_tokens + 1

    @property
    def draft_runs(self) -> int:
        """Sequential runs of the drafter per step: k."""
        return self.draft_tokens

    @property
    def accepted_tokens(self) -> float:
        """Expected tokens accepted per sequence and step (the reported factor, if any)."""
        if self.reported is not None:
            return self.reported
        return expected_accepted_tokens(self.draft_tokens, self.acceptance)

    @property
    def sampled(self) -> bool:
        """Whether a step's accepted tokens are a random draw (drafts verified as work)."""
        return self.draft_tokens > 0 and self.reported is None
