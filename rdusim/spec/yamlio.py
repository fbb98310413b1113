"""Reading YAML/JSON spec files with line numbers, and validating them with pydantic.

Only this layer touches spec files. Errors carry the file, the dotted key path and the line of
the offending key, so a user can jump straight to it.

Limits, so that no input can make a load slow or crash it (each is named in its error message):

- a spec file is UTF-8 text of at most `MAX_FILE_BYTES` bytes;
- collections nest at most `MAX_DEPTH` levels deep (checked on the parser's event stream, before
  any recursive step runs);
- a document holds at most `MAX_NODES` values once YAML aliases are expanded.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import errno
import re
import types
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent, Event
from ruamel.yaml.parser import RoundTripParser

from rdusim.errors import SpecError, SpecErrors

M = TypeVar("M", bound=BaseModel)

MAX_FILE_BYTES = 1 << 20  # 1 MiB; the shipped specs are a few kB
MAX_DEPTH = 64  # nesting levels; the shipped specs use at most 5
MAX_NODES = 100_000  # values after alias expansion


def path_problem(path: str | Path) -> str | None:
    """Why the operating system cannot use `path` as a file name (too long, a NUL), or None.

    A missing file is not a problem here: callers say "not found" in their own words.
    """
    try:
        Path(path).stat()
    except ValueError:  # embedded NUL
        return "the file name contains a NUL character"
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return f"the file name is too long ({len(str(path))} characters)"
    return None


def check_path(text: str, *, file: str | None = None, key: str, line: int | None = None) -> None:
    """Raise a `SpecError` on `key` when `text` cannot name a file at all."""
    problem = path_problem(text)
    if problem:
        raise SpecError(
            problem,
            file=file,
            key=key,
            line=line,
            fix="give a shorter path (each directory or file name at most 255 bytes)",
        )


def check_path_keys(
    data: Any, keys: Sequence[tuple[str, ...]], *, file: str, doc: Any, base: Path
) -> None:
    """Refuse a file name at any of `keys` (paths a spec refers to, relative to `base`) that the
    operating system cannot use at all, naming the key and its line."""
    for key in keys:
        value = data
        for part in key:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str):
            line = line_of(doc, key)
            check_path(value, file=file, key=dotted(key), line=line)
            check_path(str(base / value), file=file, key=dotted(key), line=line)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file into ruamel's line-aware containers."""
    p = Path(path)
    problem = path_problem(p)
    if problem:
        raise SpecError(problem, file=str(p), fix="give a shorter path to the spec file")
    if not p.exists():
        raise SpecError(
            "file not found",
            file=str(p),
            fix="check the path (relative paths are taken from the current directory)",
        )
    if p.is_dir():
        raise SpecError("is a directory, not a spec file", file=str(p), fix="name a .yaml file")
    data = _read_bytes(p)
    key = (str(p), data)
    doc = _parsed.get(key)
    if doc is None:
        doc = parse_document(data, file=str(p))
        _parsed[key] = doc
        if len(_parsed) > PARSED_CACHE_SIZE:
            _parsed.pop(next(iter(_parsed)))
    return copy.deepcopy(doc)  # callers may change what they read; the kept one stays as read


# Spec files parsed in this process, by path and content: a command reads its mapping, the
# model and the hardware more than once (the paths' check, the mapping with and without its
# `--set` overrides, its reference). A copy of a kept parse (line numbers included) is the
# parse of the same bytes; a file that changes is parsed again.
PARSED_CACHE_SIZE = 64
_parsed: dict[tuple[str, bytes], Any] = {}


def clear_parsed() -> None:
    """Forget the kept parses."""
    _parsed.clear()


def _read_bytes(p: Path) -> bytes:
    """The file's bytes, refusing to read more than `MAX_FILE_BYTES` (e.g. from /dev/zero)."""
    try:
        with p.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(
            f"cannot read the file: {exc.strerror or exc}",
            file=str(p),
            fix="check that the file exists and that you may read it",
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(
            f"file is larger than {MAX_FILE_BYTES} bytes, the limit for a spec file",
            file=str(p),
            fix="name the YAML or JSON spec file (spec files are a few kB)",
        )
    return data


def decode_text(data: bytes, *, file: str) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is allowed); anything else is a `SpecError`."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        hint, fix = _not_utf8(data)
        raise SpecError(
            f"file is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} ({hint})",
            file=file,
            fix=fix,
        ) from None


def _not_utf8(data: bytes) -> tuple[str, str]:
    """What the bytes probably are, and how to turn them into a UTF-8 spec."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return (
            "it starts with a UTF-16 byte-order mark",
            "save the file as UTF-8, e.g. iconv -f UTF-16 -t UTF-8 FILE > NEW.yaml",
        )
    if data.startswith(b"\x1f\x8b"):
        return "it looks gzip-compressed", "decompress it first, e.g. gunzip -c FILE > NEW.yaml"
    head = data[:4096]
    controls = sum(b < 32 and b not in b"\t\n\r" for b in head)
    if controls > len(head) // 100:
        return "it looks like binary data", "name the YAML or JSON spec file, not a binary file"
    return (
        "perhaps Latin-1 or another legacy encoding",
        "save the file as UTF-8, e.g. iconv -f LATIN1 -t UTF-8 FILE > NEW.yaml",
    )


def parse_document(data: bytes | str, *, file: str) -> Any:
    """Parse YAML or JSON text (bytes must be UTF-8) within the limits in the module docstring."""
    text = decode_text(data, file=file) if isinstance(data, bytes) else data
    yaml = YAML(typ="rt")
    yaml.Parser = _DepthLimitedParser
    try:
        doc = yaml.load(text)
    except _TooDeep as exc:
        raise _too_deep(exc.event, file) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SpecError(
            f"malformed YAML: {exc.problem or exc.context}",
            file=file,
            line=line,
            fix="fix the YAML syntax at that line (indentation, a missing ':' or quote)",
        ) from None
    except YAMLError as exc:  # unusual scanner errors without marks
        raise SpecError(
            f"malformed YAML: {_one_line(str(exc))}", file=file, fix="fix the YAML syntax"
        ) from None
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        # raised by ruamel's constructors on tagged or oversized values (`!!bool maybe`,
        # an integer of thousands of digits)
        detail = repr(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise SpecError(
            f"cannot read a value: {_one_line(detail)}",
            file=file,
            fix="write plain numbers, strings and booleans (no !!tags, no huge literals)",
        ) from None
    if doc is None:
        raise SpecError("file is empty", file=file, fix="write the spec's keys into it")
    _check_values(doc, file=file)
    return doc


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _check_depth(events: Iterator[Event], *, file: str) -> None:
    """Stop at the first collection nested deeper than `MAX_DEPTH`, before composing anything."""
    depth = 0
    for event in events:
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(event, file)
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


def _too_deep(event: Event, file: str) -> SpecError:
    mark = event.start_mark
    return SpecError(
        f"nested more than {MAX_DEPTH} levels deep (the limit for a spec file)",
        file=file,
        line=mark.line + 1 if mark is not None else None,
        fix="flatten the structure; a spec needs only a few levels of nesting",
    )


class _TooDeep(Exception):
    """A collection nested deeper than `MAX_DEPTH`: its start event."""

    def __init__(self, event: Event) -> None:
        super().__init__(event)
        self.event = event


class _DepthLimitedParser(RoundTripParser):
    """ruamel's round-trip parser, stopping at the first collection nested deeper than
    `MAX_DEPTH`. The composer recurses once per level as it takes each event, so counting here
    refuses a deep document before any deep recursion, in the same pass that loads it."""

    _depth = 0

    def get_event(self) -> Event:
        event = super().get_event()
        if isinstance(event, CollectionStartEvent):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _TooDeep(event)
        elif isinstance(event, CollectionEndEvent):
            self._depth -= 1
        return event


def _check_values(doc: Any, *, file: str) -> None:
    """Walk the loaded document once: bounded depth and size after alias expansion (a YAML
    "billion laughs" or a self-referencing alias), and text that can be printed."""
    budget = [MAX_NODES]

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise SpecError(
                f"holds more than {MAX_NODES} values once its YAML aliases are expanded",
                file=file,
                fix="write the values out instead of nesting aliases (*name) inside each other",
            )
        if len(path) > MAX_DEPTH:
            raise SpecError(
                f"nested more than {MAX_DEPTH} levels deep (through YAML aliases)",
                file=file,
                key=dotted(path[:2]) + "...",
                fix="remove the alias (*name) that refers to the collection containing it",
            )
        if isinstance(node, str):
            _check_text(node, file=file, doc=doc, path=path)
        elif isinstance(node, dict):
            for k, v in node.items():
                if isinstance(k, str):
                    _check_text(k, file=file, doc=doc, path=path)
                walk(v, (*path, str(k)))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(doc, ())


def _check_text(text: str, *, file: str, doc: Any, path: tuple[str | int, ...]) -> None:
    """Refuse lone surrogates (from a `"\\udc80"` escape): such text cannot be printed or saved."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(
            "contains an escaped UTF-16 surrogate, which is not a character",
            file=file,
            key=dotted(path) or None,
            line=line_of(doc, path),
            fix="write the character itself, or a \\U escape of a real code point",
        ) from None


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


def kernel_key(path: tuple[str | int, ...], name: str | None) -> str:
    """The dotted key of `path` as `--set` takes it: under `kernels`, the kernel named `name`
    rather than numbered (`kernels.dense.Decoder.sharding.tp`, not `kernels.dense[0]...`)."""
    if name and len(path) >= 3 and path[0] == "kernels" and isinstance(path[2], int):
        return dotted((*path[:2], name, *path[3:]))
    return dotted(path)


def settable_key(path: tuple[str | int, ...], data: Any) -> str:
    """`kernel_key` with the kernel's name read from the mapping's plain `data`."""
    name = None
    if len(path) >= 3 and path[0] == "kernels" and isinstance(path[2], int):
        kernels = data.get("kernels") if isinstance(data, dict) else None
        kind = kernels.get(path[1]) if isinstance(kernels, dict) else None
        if isinstance(kind, list) and path[2] < len(kind) and isinstance(kind[path[2]], dict):
            found = kind[path[2]].get("name")
            name = found if isinstance(found, str) else None
    return kernel_key(path, name)


def parse_value(text: str) -> Any:
    """A `--set` value as YAML reads a scalar: `8192` -> int, `0.5` -> float, `true` -> bool;
    anything else (a word, a list, a mapping, null, malformed YAML) stays the text as given."""
    yaml = YAML(typ="safe")
    try:
        _check_depth(yaml.parse(text), file="--set")
        value = yaml.load(text)
    except Exception:  # malformed, too deep, or a constructor's complaint: keep the text
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
    "literal_error": "use one of the allowed values the message lists",
    "enum": "use one of the allowed values the message lists",
    "greater_than": "use a positive value",
    "greater_than_equal": "use a larger value",
    "less_than": "use a smaller value",
    "less_than_equal": "use a value within the limit the message names",
    "finite_number": "write a finite number (not .inf or .nan)",
    "string_too_long": "use a shorter string",
    "dict_type": "write a section of keys (key: value lines indented under it)",
    "list_type": "write a list, e.g. [a, b]",
    "string_type": "write a string",
    "bool_not_number": "write a number",
    "inconsistent": "make this key agree with the other key the message names",
    "value_error": "change this section as the message says",
}


SHOWN_VALUE_CHARS = 80


def shown_value(value: Any) -> str:
    """`repr(value)`, cut short so that a huge value does not flood the message."""
    return shortened(repr(value))


def shortened(text: str) -> str:
    """`text`, cut short (its start, its end and its length) when longer than
    `SHOWN_VALUE_CHARS`."""
    if len(text) <= SHOWN_VALUE_CHARS:
        return text
    return f"{text[: SHOWN_VALUE_CHARS - 20]}...{text[-10:]} ({len(text)} characters)"


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
                msg += f" (got {shown_value(got)})"
            errors.append(
                SpecError(
                    msg,
                    file=file,
                    key=settable_key(loc, data) or None,
                    line=line_of(doc, loc) if doc is not None else None,
                    fix=_fix(err, model, loc[len(prefix) :]),
                )
            )
        if len(errors) == 1:
            raise errors[0] from None
        raise SpecErrors(errors) from None


def _fix(err: Any, model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """The fix for one pydantic error: its type's, led by the nearest allowed value when a
    choice was misspelt (`'dr'` for `'ddr'`), or by the nearest key when a key was."""
    fix = _FIXES.get(err["type"], "see the documentation of this key")
    expected = (err.get("ctx") or {}).get("expected")
    got = err.get("input")
    choice = err["type"] in ("enum", "literal_error")
    if choice and isinstance(expected, str) and isinstance(got, str):
        fix = did_you_mean(got, re.findall(r"'([^']*)'", expected)) + fix
    elif err["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
        fix = did_you_mean(loc[-1], _fields_at(model, loc[:-1])) + fix
    return fix


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section of `model` at `loc` (none when it is not a section)."""
    for key in loc:
        info = model.model_fields.get(key) if isinstance(key, str) else None
        ann = info.annotation if info else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def load_model(model: type[M], path: str | Path) -> M:
    """Read a spec file and validate it as `model`."""
    doc = read_document(path)
    return validate(model, to_plain(doc), file=str(path), doc=doc)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate `word` was most likely meant to be, if any is close enough to say so."""
    hits = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return hits[0] if hits else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`"did you mean 'x'? "` for the closest candidate, or nothing: a prefix for a fix text."""
    best = closest(word, candidates)
    return f"did you mean {best!r}? " if best else ""


def _optional_of(annotation: Any) -> Any:
    """`X` for an optional section `X | None` (its fields are paths too), else `annotation`."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted path into a spec: its fields, and those of its sections, for suggestions."""
    paths: list[str] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        ann = _optional_of(info.annotation)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            paths.extend(field_paths(ann, f"{path}."))
    return paths
