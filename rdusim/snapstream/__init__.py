"""SnapStream: SnapKV compression at prefill + a StreamingLLM ring buffer at decode.

`rdusim.snapstream` is the numpy reference (static shapes throughout) and `onchip` sizes the
decode cache update both ways; its ops in the IR are `rdusim.ir.builders.snapstream`'s.
"""

from rdusim.snapstream.config import SnapStreamConfig
from rdusim.snapstream.reference import (
    NaiveSnapStreamCache,
    SnapStreamCache,
    SnapStreamCacheBase,
    VoteNormalisation,
    attend,
    full_attention,
    masked_attention,
    select_topk,
    snapkv_scores,
)

__all__ = [
    "NaiveSnapStreamCache",
    "SnapStreamCache",
    "SnapStreamCacheBase",
    "SnapStreamConfig",
    "VoteNormalisation",
    "attend",
    "full_attention",
    "masked_attention",
    "select_topk",
    "snapkv_scores",
]
