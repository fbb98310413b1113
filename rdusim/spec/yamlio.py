"""Reading YAML/JSON spec files with line numbers, and validating them with pydantic.

Only this layer touches spec files. Errors carry the file, the dotted key path and the line of
the offending key, so a user can jump straight to it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from rdusim.errors import SpecError, SpecErrors

M = TypeVar("M", bound=BaseModel)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file into ruamel's line-aware containers."""
    p = Path(path)
    if not p.exists():
        raise SpecError(
            "file not found",
            file=str(p),
            fix="check the path (relative paths are taken from the current directory)",
        )
    if p.is_dir():
        raise SpecError("is a directory, not a spec file", file=str(p), fix="name a .yaml file")
    text = p.read_text(encoding="utf-8")
    yaml = YAML(typ="rt")
    try:
        doc = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SpecError(
            f"malformed YAML: {exc.problem or exc.context}",
            file=str(p),
            line=line,
            fix="fix the YAML syntax at that line (indentation, a missing ':' or quote)",
        ) from None
    except YAMLError as exc:  # pragma: no cover - unusual scanner errors without marks
        raise SpecError(f"malformed YAML: {exc}", file=str(p), fix="fix the YAML syntax") from None
    if doc is None:
        raise SpecError("file is empty", file=str(p), fix="write the spec's keys into it")
    return doc


def line_of(doc: Any, path: tuple[str | int, ...]) -> int | None:
    """1-based line of the deepest key of `path` that exists in `doc`."""
    line: int | None = None
    node = doc
    for part in path:
        if isinstance(node, CommentedMap) and part in node:
            with contextlib.suppress(KeyError, TypeError):
                line = node.lc.key(part)[0] + 1
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
            with contextlib.suppress(KeyError, TypeError):
                line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            break
    return line


def to_plain(node: Any) -> Any:
    """Convert ruamel containers to plain dicts/lists (pydantic wants plain data)."""
    if isinstance(node, dict):
        return {str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    return node


def dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_value(text: str) -> Any:
    """A `--set` value as YAML reads a scalar: `8192` -> int, `0.5` -> float, `true` -> bool;
    anything else (a word, a list, a mapping, null, malformed YAML) stays the text as given."""
    try:
        value = YAML(typ="safe").load(text)
    except Exception:
        return text
    return value if isinstance(value, bool | int | float | str) else text


_FIXES = {
    "missing": "add the key",
    "extra_forbidden": "remove the key or check its spelling",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "int_from_float": "write a whole number",
    "float_parsing": "write a number",
    "float_type": "write a number",
    "bool_parsing": "write true or false",
    "literal_error": "use one of the allowed values",
    "greater_than": "use a positive value",
    "greater_than_equal": "use a larger value",
    "string_type": "write a string",
    "bool_not_number": "write a number",
    "inconsistent": "make this key agree with the other key the message names",
}


def reject_bools(value: Any, annotation: Any) -> Any:
    """Refuse `true`/`false` where a number is expected (pydantic's lax mode reads them as 1/0)."""
    if isinstance(value, bool) and annotation is not bool:
        raise PydanticCustomError("bool_not_number", "Input should be a number, not a boolean")
    return value


def validate(model: type[M], data: Any, *, file: str, doc: Any = None, prefix: tuple = ()) -> M:
    """Validate `data` against `model`, turning pydantic errors into located `SpecError`s."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            loc = prefix + tuple(p for p in err["loc"] if not str(p).startswith("function-"))
            # pydantic puts union/tagged branches in loc; keep only real keys
            loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
            msg = err["msg"]
            if err["type"] == "value_error":
                msg = msg.removeprefix("Value error, ")
            got = err.get("input")
            if err["type"] not in ("missing", "inconsistent") and not isinstance(got, dict | list):
                msg += f" (got {got!r})"
            errors.append(
                SpecError(
                    msg,
                    file=file,
                    key=dotted(loc) or None,
                    line=line_of(doc, loc) if doc is not None else None,
                    fix=_FIXES.get(err["type"], "see the documentation of this key"),
                )
            )
        if len(errors) == 1:
            raise errors[0] from None
        raise SpecErrors(errors) from None


def load_model(model: type[M], path: str | Path) -> M:
    """Read a spec file and validate it as `model`."""
    doc = read_document(path)
    return validate(model, to_plain(doc), file=str(path), doc=doc)
