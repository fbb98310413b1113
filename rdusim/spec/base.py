"""The base of every spec model: unknown keys are errors, values are frozen, and a boolean is
never accepted where a number is meant (YAML's `true` would otherwise pass as 1)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from rdusim.spec.yamlio import reject_bools


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return reject_bools(v, field.annotation if field else None)
