"""Fuzzing what users feed `rdusim model` and `rdusim map`: every mutated model file, hardware
file or option value must end in exit 0 with finite JSON on stdout, or exit 2 with a message on
stderr; never a traceback, never a hang.

A seeded mutator builds each case from its number alone, so a failure reproduces by its test id
(`-k "case-17]"`) and its message shows the mutation and the command. It deletes keys, swaps
types, inserts huge, negative, zero, NaN and infinite numbers and unknown keys, and damages the
text itself (bytes that are not UTF-8, deep nesting, truncation). Cases run in-process with short
workloads (prefill seq_len 8192, decode batch 1), each under a time limit.

The default run has `DEFAULT_CASES` cases; `python -m pytest -m slow tests/test_fuzz_inputs.py`
runs `SLOW_CASES` more.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import random
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from ruamel.yaml import YAML

from rdusim.cli import main
from tests.conftest import MAPPINGS_DIR, MODELS_DIR

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "rdusim" / "hardware"
DEFAULT_CASES = 360
SLOW_CASES = 1500
CASE_SECONDS = 20  # a case that runs longer counts as a hang

MAPPINGS = {  # mapping -> (its model file, --set values that keep a run short)
    "r1_prefill.yaml": ("deepseek-r1.yaml", ["seq_len=8192"]),
    "r1_decode.yaml": ("deepseek-r1.yaml", ["batch=1", "seq_len=8192"]),
    "llama31_8b_prefill.yaml": ("llama-3.1-8b.yaml", ["seq_len=8192"]),
    "llama31_8b_decode.yaml": ("llama-3.1-8b.yaml", ["batch=1", "seq_len=8192"]),
}
MODEL_FILES = sorted(p.name for p in MODELS_DIR.glob("*.yaml"))
HARDWARE_FILES = sorted(p.name for p in HARDWARE_DIR.glob("*.yaml"))

NUMBERS: list[Any] = [
    0,
    -1,
    -(10**9),
    1,
    2,
    3,
    7,
    10**30,
    2**63,
    1e29,
    1e300,
    -1e300,
    1e-300,
    0.5,
    1.5,
    math.nan,
    math.inf,
    -math.inf,
]
PLAUSIBLE_INTS = [1, 2, 3, 4, 6, 8, 16, 32, 64, 100, 128, 1000, 4096, 8192, 65536]
OTHER_TYPES: list[Any] = ["", "abc", True, False, None, [], {}, [1, 2], {"a": 1}, "x" * 300]
PLAUSIBLE_TEXTS = ["1", "2", "3", "4", "16", "100", "1000", "4096", "8192", "16384", "65536"]
PLAUSIBLE_TEXTS += ["true", "false", "max", "prefill", "decode", "sn40l-8", "0.9", "2.4"]
OPTION_TEXTS = [
    "0",
    "-1",
    "1",
    "2",
    "7",
    "64",
    "8192",
    "1e29",
    "100000000000000000000000",
    "9" * 50,
    "-1e300",
    "nan",
    ".nan",
    "inf",
    ".inf",
    "-.inf",
    "0.5",
    "1.5",
    "true",
    "false",
    "null",
    "~",
    "",
    "abc",
    "max",
    "[1, 2]",
    "{a: 1}",
    "'quoted'",
    "1_000",
    "0x10",
    "é",
    "\udcff",  # an undecodable command-line byte, as Python passes it on
    "[" * 1000,
    "a" * 5000,
]


@dataclass
class Case:
    """One fuzz case: the command line (`{dir}` stands for the case's directory) and files."""

    kind: str
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        args = " ".join(a if len(a) <= 80 else a[:60] + f"...({len(a)} chars)" for a in self.args)
        return f"{self.kind}: rdusim {args}\n  mutations: " + "; ".join(self.notes)


# --------------------------------------------------------------------------------------------
# mutations of parsed data


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _dump(data: Any) -> bytes:
    buf = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.dump(data, buf)
    return buf.getvalue().encode("utf-8")


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path in `node` (sections and leaves)."""
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _random_value(rng: random.Random, old: Any) -> tuple[Any, str]:
    """A new value: often a plausible one (so that runs reach the compiler and simulator),
    otherwise an extreme number or a value of another type."""
    kind = rng.choice(["plausible", "plausible", "scale", "number", "type"])
    is_number = isinstance(old, int | float) and not isinstance(old, bool)
    if kind == "plausible" and is_number:
        if isinstance(old, int):
            return rng.choice(PLAUSIBLE_INTS), "plausible"
        # a fraction stays one; other quantities move within a factor of 3
        return old * (rng.uniform(0.2, 1) if 0 < old <= 1 else rng.uniform(0.3, 3)), "plausible"
    if kind in ("scale", "plausible") and is_number:
        factor = rng.choice([0, -1, 0.5, 2, 3, 1000, 10**12])
        scaled = old * factor
        return (int(scaled) if isinstance(old, int) else scaled), f"x{factor}"
    if kind == "type":
        return rng.choice(OTHER_TYPES), "type swap"
    return rng.choice(NUMBERS), "number"


def mutate_data(rng: random.Random, data: Any) -> list[str]:
    """Apply one to three mutations to `data` in place; describe each."""
    notes = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        paths = list(_paths(data))
        op = rng.choice(["delete", "replace", "replace", "replace", "unknown", "nest"])
        if not paths or not isinstance(data, dict):
            break
        path = rng.choice(paths)
        parent = _parent(data, path)
        if op == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
            notes.append(f"delete {path}")
        elif op == "unknown" and isinstance(parent, dict):
            parent[f"no_such_key_{rng.randint(0, 99)}"] = rng.choice(NUMBERS + OTHER_TYPES)
            notes.append(f"unknown key beside {path}")
        elif op == "nest":
            value: Any = 1
            depth = rng.choice([3, 30, 70])
            for _ in range(depth):
                value = [value]
            parent[path[-1]] = value
            notes.append(f"{path} = list nested {depth} deep")
        else:
            new, how = _random_value(rng, parent[path[-1]])
            parent[path[-1]] = new
            notes.append(f"{path} = {new!r:.60} ({how})")
    return notes


# --------------------------------------------------------------------------------------------
# mutations of the text


def _set_line(text: str, rng: random.Random, value: str) -> str:
    lines = text.splitlines()
    keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")]
    i = rng.choice(keyed)
    key = lines[i].split(":", 1)[0]
    lines[i] = f"{key}: {value}"
    return "\n".join(lines) + "\n"


def mutate_text(rng: random.Random, text: str) -> tuple[bytes, str]:
    """Damage the text of a spec: encodings, bytes, nesting, truncation, YAML oddities."""
    op = rng.choice(
        [
            "latin-1",
            "utf-16",
            "gzip",
            "random bytes",
            "truncate",
            "deep flow",
            "deep block",
            "byte flip",
            "control char",
            "surrogate",
            "tag",
            "alias bomb",
            "huge literal",
            "tab indent",
        ]
    )
    if op == "latin-1":
        return (text + "# café\n").encode("latin-1", "replace"), op
    if op == "utf-16":
        return text.encode("utf-16"), op
    if op == "gzip":
        return gzip.compress(text.encode()), op
    if op == "random bytes":
        return rng.randbytes(rng.randint(1, 2048)), op
    if op == "truncate":
        return text[: rng.randint(0, len(text))].encode(), op
    if op == "deep flow":
        n = rng.choice([65, 1000, 10_000])
        return _set_line(text, rng, "[" * n + "]" * rng.choice([0, n])).encode(), f"{op} {n}"
    if op == "deep block":
        n = rng.choice([65, 300])
        block = "".join("  " * (i + 1) + f"k{i}:\n" for i in range(n))
        return (text + "deep:\n" + block + "  " * (n + 1) + "v\n").encode(), f"{op} {n}"
    if op == "byte flip":
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 5)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw), op
    if op == "control char":
        return _set_line(text, rng, rng.choice(["a\x00b", "\x07", "a\x1bb"])).encode(), op
    if op == "surrogate":
        return _set_line(text, rng, '"\\udc80"').encode(), op
    if op == "tag":
        return _set_line(
            text, rng, rng.choice(["!!bool maybe", "!!binary aGk=", "!!set {a}"])
        ).encode(), op
    if op == "alias bomb":
        bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
        return (text + "\n".join(bomb) + "\n").encode(), op
    if op == "huge literal":
        return _set_line(text, rng, "1" + "0" * rng.choice([400, 5000])).encode(), op
    return text.replace("  ", "\t", 1).encode(), op


# --------------------------------------------------------------------------------------------
# cases


def _mapping_keys(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Dotted keys of the mapping spec, as `--set` accepts them."""
    from rdusim.spec.mapping import MappingSpec

    model = model or MappingSpec
    keys = []
    for name, info in model.model_fields.items():
        keys.append(prefix + name)
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _mapping_keys(ann, prefix + name + ".")
    return keys


def _fast_sets(mapping: str) -> list[str]:
    return [a for s in MAPPINGS[mapping][1] for a in ("--set", s)]


def _mutated_spec(rng: random.Random, source: Path, case: Case) -> bytes:
    if rng.random() < 0.7:
        data = _load(source)
        case.notes += mutate_data(rng, data)
        return _dump(data)
    raw, note = mutate_text(rng, source.read_text(encoding="utf-8"))
    case.notes.append(note)
    return raw


def _model_file_case(rng: random.Random) -> Case:
    case = Case("model-file", ["model", "{dir}/model.yaml", "--json"])
    case.files["model.yaml"] = _mutated_spec(rng, MODELS_DIR / rng.choice(MODEL_FILES), case)
    if rng.random() < 0.5:
        case.args += ["--phase", "decode", "--seq-len", "8192", "--batch", "4"]
    return case


def _model_args_case(rng: random.Random) -> Case:
    case = Case("model-args", ["model", str(MODELS_DIR / rng.choice(MODEL_FILES)), "--json"])
    for flag in rng.sample(["--seq-len", "--batch", "--phase"], rng.randint(1, 3)):
        value = rng.choice([*OPTION_TEXTS, "prefill", "decode"])
        case.args += [f"{flag}={value}"]
        case.notes.append(f"{flag}={value!r:.40}")
    return case


def _mapping_text(mapping: str, model_path: str | None = None) -> str:
    """A shipped mapping's text (it names its shipped model, so a copy runs anywhere), with its
    model replaced by `model_path` if given."""
    text = (MAPPINGS_DIR / mapping).read_text(encoding="utf-8")
    line = f"model: {MAPPINGS[mapping][0].removesuffix('.yaml')}\n"
    assert line in text, line
    return text.replace(line, f"model: {model_path}\n") if model_path else text


def _map_model_case(rng: random.Random) -> Case:
    mapping = rng.choice(sorted(MAPPINGS))
    case = Case("map-model", ["map", "{dir}/mapping.yaml", "--json", *_fast_sets(mapping)])
    case.files["model.yaml"] = _mutated_spec(rng, MODELS_DIR / MAPPINGS[mapping][0], case)
    case.files["mapping.yaml"] = _mapping_text(mapping, "model.yaml").encode()
    case.notes.insert(0, f"the model of {mapping}")
    return case


def _map_hardware_case(rng: random.Random) -> Case:
    mapping = rng.choice(sorted(MAPPINGS))
    case = Case("map-hardware", ["map", "{dir}/mapping.yaml", "--json", *_fast_sets(mapping)])
    # mostly the 16-socket preset: the shipped mappings shard 16 ways
    preset = "sn40l-16.yaml" if rng.random() < 0.8 else rng.choice(HARDWARE_FILES)
    case.files["hw.yaml"] = _mutated_spec(rng, HARDWARE_DIR / preset, case)
    case.files["mapping.yaml"] = _mapping_text(mapping).encode()
    case.args += ["--set", "hardware=hw.yaml"]
    case.notes.insert(0, f"the hardware of {mapping}")
    return case


def _map_set_case(rng: random.Random) -> Case:
    mapping = rng.choice(sorted(MAPPINGS))
    case = Case("map-set", ["map", "{dir}/mapping.yaml", "--json", *_fast_sets(mapping)])
    case.files["mapping.yaml"] = _mapping_text(mapping).encode()
    keys = [*_mapping_keys(), "nosuch", "snapstream.nosuch"]
    for _ in range(rng.randint(1, 2)):
        key = rng.choice(keys)
        value = rng.choice(PLAUSIBLE_TEXTS if rng.random() < 0.5 else OPTION_TEXTS)
        case.args += ["--set", f"{key}={value}"]
        case.notes.append(f"--set {key}={value!r:.40}")
    return case


KINDS: list[tuple[Callable[[random.Random], Case], int]] = [
    (_model_file_case, 30),
    (_model_args_case, 10),
    (_map_model_case, 20),
    (_map_hardware_case, 20),
    (_map_set_case, 20),
]


def make_case(number: int) -> Case:
    """The fuzz case with this number (the same on every run and machine)."""
    rng = random.Random(f"rdusim-fuzz-{number}")
    build = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
    return build(rng)


# --------------------------------------------------------------------------------------------
# running and judging a case


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise TimeoutError in the test if the block runs longer (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"no result after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def non_finite(node: Any, path: str = "") -> Iterator[str]:
    if isinstance(node, float) and not math.isfinite(node):
        yield f"{path} = {node}"
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from non_finite(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from non_finite(v, f"{path}[{i}]")


def run_case(case: Case, directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the case and check it ends cleanly; its exit code and stderr."""
    for name, data in case.files.items():
        (directory / name).write_bytes(data)
    args = [a.replace("{dir}", str(directory)) for a in case.args]
    capsys.readouterr()
    with time_limit(CASE_SECONDS):
        code = main(args)
    out, err = capsys.readouterr()
    where = case.describe()
    assert "Traceback" not in err, where
    if code == 0:
        report = json.loads(out)
        bad = list(non_finite(report))
        assert not bad, f"{where}\n  non-finite values: {bad[:5]}"
    else:
        assert code == 2, f"{where}\n  exit {code}: {err}"
        assert err.startswith(("rdusim: error:", "usage:")), f"{where}\n  stderr: {err!r:.300}"
    return code, err


# Failures that come from code outside the input layer, recognised by the case's command or
# mutation, each with an input that reproduces it: none are known. Add an entry (a predicate and a
# reason) to mark such cases as expected failures while their cause is being fixed.
KNOWN_FAILURES: list[tuple[Callable[[Case], bool], str]] = []


def _check(number: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: Any) -> None:
    case = make_case(number)
    for matches, reason in KNOWN_FAILURES:
        if matches(case):
            request.applymarker(pytest.mark.xfail(reason=reason, strict=False))
    run_case(case, tmp_path, capsys)


@pytest.mark.parametrize("number", range(DEFAULT_CASES), ids=lambda n: f"case-{n}")
def test_fuzz(
    number: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: Any
) -> None:
    _check(number, tmp_path, capsys, request)


@pytest.mark.slow
@pytest.mark.parametrize(
    "number", range(DEFAULT_CASES, DEFAULT_CASES + SLOW_CASES), ids=lambda n: f"case-{n}"
)
def test_fuzz_more(
    number: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: Any
) -> None:
    _check(number, tmp_path, capsys, request)


@pytest.mark.parametrize(
    ("path", "mapping", "sets"),
    [
        (("links", "p2p_bandwidth"), "llama31_8b_prefill.yaml", ["seq_len=8192"]),
        (("socket", "hbm", "bandwidth"), "llama31_8b_decode.yaml", ["batch=1", "seq_len=8192"]),
        (("calibration", "attention_efficiency"), "llama31_8b_prefill.yaml", ["seq_len=8192"]),
    ],
    ids=["p2p-bandwidth", "hbm-bandwidth", "attention-efficiency"],
)
def test_tiny_hardware_quantity(
    path: tuple[str, ...],
    mapping: str,
    sets: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Inputs the fuzzer once found crashing the run (sn40l-16 with one value 1e-300): the hardware
    spec now refuses them, with the key named."""
    data = _load(HARDWARE_DIR / "sn40l-16.yaml")
    _parent(data, path)[path[-1]] = 1e-300
    case = Case(
        "map-hardware",
        ["map", "{dir}/mapping.yaml", "--json", "--set", "hardware=hw.yaml"],
        files={"hw.yaml": _dump(data), "mapping.yaml": _mapping_text(mapping).encode()},
        notes=[f"{path} = 1e-300 in sn40l-16"],
    )
    case.args += [a for s in sets for a in ("--set", s)]
    code, err = run_case(case, tmp_path, capsys)
    assert code == 2 and ".".join(path) in err, err


def test_cases_are_reproducible_and_varied() -> None:
    assert make_case(5).describe() == make_case(5).describe()
    kinds = {make_case(n).kind for n in range(60)}
    assert kinds == {"model-file", "model-args", "map-model", "map-hardware", "map-set"}
