"""The static graphs a deployment runs, and what they allow a request to be.

SN40L runs static graphs (SnapStream paper §2.3): every tensor has a fixed shape, so

* a prefill graph is compiled for one prompt length; a shorter prompt is padded to it and pays
  for the whole graph. A deployment compiles graphs for several lengths (buckets) and runs a
  prompt on the shortest that holds it: by default powers of two from `MIN_BUCKET` tokens up to
  the prefill mapping's `seq_len` L_max, and L_max itself (`prefill_buckets: powers-of-two`);
  `prefill_buckets: padded` compiles L_max alone (every prompt padded to it); a list compiles
  those lengths and L_max. Only the graphs some request runs on are simulated. A prompt longer
  than L_max cannot run at all and is refused when the workload loads;
* a decode graph is compiled for a fixed number of sequences (its batch: the slots) and a fixed
  cache length; a sequence decodes "until the EOS token or x_{L_max} is generated" (§2.3), so a
  request's prompt plus output must fit in the decode mapping's `seq_len`. SnapStream keeps the
  cache at its compressed budget however long the sequence grows (§3.1, §3.3), so its slot needs only
  that many positions, and more slots fit in HBM (§5.2, Table 5: 4x the batch);
* with multi-token prediction or a draft model a step accepts `tokens_per_step` tokens per
  sequence on average. When the step verifies k drafts at acceptance a (`draft_tokens` > 0),
  each step's accepted tokens are drawn (`rdusim.serving.acceptance`) and a request takes as
  many steps as its draws need for its tokens after the first (which the prefill graph
  produces); a factor reported on a plain step (`mtp: {mode: scaled}`) has no distribution, so
  the request needs ceil((output - 1) / tokens_per_step) steps.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rdusim.errors import SpecError, SpecErrors
from rdusim.serving.arrivals import Request, Requests
from rdusim.serving.step_times import GraphFacts
from rdusim.spec.workload import BucketScheme, ResolvedWorkload

UNLIMITED_HOLD = 1 << 40
MIN_BUCKET = 1024  # the shortest default prefill graph, in tokens


@dataclass(frozen=True)
class GraphShape:
    """The serving-relevant shape of a deployment's two graphs."""

    decode_slots: int
    cache_len: int  # positions per slot (the compressed budget with SnapStream)
    max_sequence: int  # prompt + output tokens a slot can hold
    tokens_per_step: float = 1.0
    prefill_lengths: tuple[int, ...] = ()  # increasing; the last is the longest prompt
    prefill_batch: int = 1
    kv_bytes_per_token: float = 0.0
    snapstream: bool = False
    prefill_hold: int = UNLIMITED_HOLD  # finished caches a prefill node may hold (disaggregated)
    draft_tokens: int = 0  # k drafts verified per step (0: steps accept their mean, undrawn)
    acceptance: float = 1.0  # per-draft acceptance rate a

    def __post_init__(self) -> None:
        if not self.prefill_lengths or list(self.prefill_lengths) != sorted(
            set(self.prefill_lengths)
        ):
            raise ValueError("prefill_lengths must be increasing and not empty")
        if self.decode_slots < 1 or self.prefill_batch < 1 or self.tokens_per_step <= 0:
            raise ValueError("decode_slots, prefill_batch and tokens_per_step must be positive")

    @property
    def longest_prompt(self) -> int:
        return self.prefill_lengths[-1]

    def graph_len(self, prompt_tokens: int) -> int:
        """The prefill graph a prompt runs on: the shortest that holds it."""
        return self.prefill_lengths[bisect.bisect_left(self.prefill_lengths, prompt_tokens)]

    def kv_tokens(self, prompt_tokens: int) -> int:
        """Cached positions a request holds after prefill (SnapStream: at most the budget)."""
        return min(prompt_tokens, self.cache_len) if self.snapstream else prompt_tokens

    def kv_bytes(self, prompt_tokens: int) -> float:
        """Bytes of a request's cache after prefill: what a disaggregated deployment moves."""
        return self.kv_tokens(prompt_tokens) * self.kv_bytes_per_token

    def decode_steps(self, output_tokens: int) -> int:
        """Decode steps a request needs after its first token at the mean rate (the engine
        draws them instead when a step verifies drafts: `rdusim.serving.acceptance`)."""
        return ceil_steps(output_tokens - 1, self.tokens_per_step)


def ceil_steps(tokens: int, tokens_per_step: float) -> int:
    """Steps that produce `tokens` tokens at `tokens_per_step` each (0 for none)."""
    if tokens <= 0:
        return 0
    return max(1, math.ceil(tokens / tokens_per_step - 1e-9))


def bucket_lengths(seq_len: int, buckets: Sequence[int] | BucketScheme | None) -> list[int]:
    """The extra prefill graph lengths of a `prefill_buckets` value (the mapping's `seq_len`
    comes on top): the listed ones, none (`padded`), or powers of two from `MIN_BUCKET` below
    `seq_len` (the default, `powers-of-two`)."""
    if buckets is None or buckets == BucketScheme.POWERS_OF_TWO:
        return [
            1 << k
            for k in range(MIN_BUCKET.bit_length() - 1, seq_len.bit_length())
            if (1 << k) < seq_len
        ]
    if buckets == BucketScheme.PADDED:
        return []
    assert not isinstance(buckets, str)
    return list(buckets)


def shape_of(
    facts: GraphFacts, buckets: Sequence[int] | BucketScheme | None, workload: ResolvedWorkload
) -> GraphShape:
    """The shape of the simulated graphs, with the workload's prefill buckets (each no longer
    than the prefill mapping's `seq_len`, which is always a graph)."""
    extra = bucket_lengths(facts.prefill_len, buckets)
    too_long = [b for b in extra if b > facts.prefill_len]
    if too_long:
        key = ("deployment", "prefill_buckets")
        raise workload.error(
            f"bucket {too_long[0]} is longer than the prefill graph ({facts.prefill_len} tokens, "
            "the prefill mapping's seq_len)",
            key,
            f"list buckets up to {facts.prefill_len} (the mapping's seq_len is always a graph), "
            "or raise seq_len with --set seq_len=...",
        )
    lengths = tuple(sorted({*extra, facts.prefill_len}))
    return GraphShape(
        decode_slots=facts.decode_slots,
        cache_len=facts.cache_len,
        max_sequence=facts.max_sequence,
        tokens_per_step=facts.tokens_per_step,
        prefill_lengths=lengths,
        prefill_batch=facts.prefill_batch,
        kv_bytes_per_token=facts.kv_bytes_per_token,
        snapstream=facts.snapstream,
        prefill_hold=facts.prefill_hold,
        draft_tokens=facts.draft_tokens,
        acceptance=facts.acceptance,
    )


def check_requests(
    requests: Sequence[Request] | Requests, shape: GraphShape, workload: ResolvedWorkload
) -> None:
    """Refuse requests the graphs cannot serve: a prompt longer than the longest prefill graph,
    or a prompt and output longer than the decode graph's maximum sequence. The error names the
    workload key (or the trace line) and how many requests are affected."""
    given = requests if isinstance(requests, Requests) else Requests.of(requests)
    prompt, output = given.prompt_tokens, given.output_tokens
    errors: list[SpecError] = []
    long_prompts = np.flatnonzero(prompt > shape.longest_prompt)
    if len(long_prompts):
        first = given.request(int(long_prompts[0]))
        errors.append(
            _request_error(
                workload,
                first,
                "prompt_tokens",
                f"{_count(long_prompts, given)} a prompt longer than the prefill graph: "
                f"{first.prompt_tokens} tokens (request {first.id}) > {shape.longest_prompt} "
                "(the prefill mapping's seq_len)",
                f"keep prompts within {shape.longest_prompt} tokens, or compile a longer "
                "prefill graph (--set seq_len=..., which sets both mappings)",
            )
        )
    # a prompt refused above is not refused twice
    long_sequences = np.flatnonzero(
        (prompt <= shape.longest_prompt) & (prompt + output > shape.max_sequence)
    )
    if len(long_sequences):
        first = given.request(int(long_sequences[0]))
        errors.append(
            _request_error(
                workload,
                first,
                "output_tokens",
                f"{_count(long_sequences, given)} more prompt + output tokens than the "
                f"decode graph's maximum sequence: {first.prompt_tokens} + "
                f"{first.output_tokens} (request {first.id}) > {shape.max_sequence} (the decode "
                "mapping's seq_len; a static graph decodes up to it, paper §2.3)",
                f"keep prompt + output within {shape.max_sequence} tokens (shorter prompts or "
                "outputs), or --set seq_len=... to compile both graphs longer",
            )
        )
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


def _count(bad: np.ndarray, all_: Requests) -> str:
    return f"{len(bad)} of {len(all_)} requests have" if len(bad) > 1 else "1 request has"


def _request_error(
    workload: ResolvedWorkload, request: Request, key: str, problem: str, fix: str
) -> SpecError:
    """An error at the workload key that drew the length, or at the trace line it came from."""
    trace = workload.trace
    if trace is not None:
        return SpecError(problem, file=trace.file, key=key, line=trace.lines[request.id], fix=fix)
    return workload.error(problem, (key,), fix)
