"""The registry of model families: `model_type` -> (config class, builders module).

A family is registered once, on its config class (`rdusim.spec.model.family`), which names its
builders module under `rdusim.ir.builders`; this module resolves those names, so the spec layer
needs nothing from the IR. A builders module provides `build_layer(cfg, kind, phase,
snapstream)`, `build_embedding(cfg)` and `build_head(cfg)` (and `build_mtp_projection(cfg)` when
the family has MTP modules).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from rdusim.ir.builders import deepseek, gqa
from rdusim.spec.model import FAMILIES as REGISTERED
from rdusim.spec.model import ModelConfig

BUILDERS: dict[str, ModuleType] = {"deepseek": deepseek, "gqa": gqa}


@dataclass(frozen=True)
class Family:
    model_type: str
    config: type[ModelConfig]
    builders: ModuleType


def _resolve() -> dict[str, Family]:
    out = {}
    for model_type, fam in REGISTERED.items():
        if fam.builders not in BUILDERS:
            raise ImportError(
                f"model family {model_type!r} names builders {fam.builders!r}, which is not one "
                f"of rdusim.ir.families.BUILDERS ({', '.join(BUILDERS)})"
            )
        out[model_type] = Family(model_type, fam.config, BUILDERS[fam.builders])
    return out


FAMILIES: dict[str, Family] = _resolve()


def family_of(cfg: ModelConfig) -> Family:
    """The registered family of a config (its exact class, so a subclass is not taken for its
    parent's family)."""
    fam = FAMILIES.get(cfg.model_type)
    if fam is None or type(cfg) is not fam.config:
        raise ValueError(f"{type(cfg).__name__} is not a registered model family's config")
    return fam
