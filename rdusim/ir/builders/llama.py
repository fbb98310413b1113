"""Llama-3.x decoder layers (GQA + RoPE + SwiGLU), embedding and LM head as IR graphs.

Llama is the plainest of the Llama-style families, which share one builder (`gqa`); this module
keeps the name its callers use.
"""

from __future__ import annotations

from rdusim.ir.builders.gqa import build_embedding, build_head, build_layer

__all__ = ["build_embedding", "build_head", "build_layer"]
