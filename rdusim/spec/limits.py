"""rdusim's bounds on the sizes a user can ask for, each defined once.

They lie far beyond any model or deployment: their use is to keep a run's time and memory
bounded, so that a slip (an extra zero) is an error naming the key, not a run that never ends.
"""

from __future__ import annotations

# Tokens in one sequence: a mapping's `seq_len`, a model's `max_position_embeddings` or
# `sliding_window`, a request's prompt and output, `rdusim model --seq-len`.
MAX_SEQ_LEN = 1 << 24  # 16M tokens
# Sequences processed together: a mapping's `batch`, `rdusim model --batch`; far beyond any
# decode batch whose cache fits in HBM.
MAX_BATCH = 1 << 20
