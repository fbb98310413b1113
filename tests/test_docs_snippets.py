"""Every snippet of README.md and docs/*.md runs as written.

A ```python block runs on its own, in a fresh namespace, so it must define (or import) every
name it uses; where a line ends in a comment that is a Python literal (`m.ops("moe")[:3]  #
['attn_norm', ...]`), the line's value must be that literal (a list ending in `...` is a prefix).
In a ```sh block, each command that starts with `rdusim ` runs through the command line (a
`\\` continues a line, `#` starts a comment) and must exit 0.

Everything runs in an empty temporary directory holding links to the checkout's `models/` and
`mappings/`, as a reader of a checkout would have them, so what a snippet writes goes there.
Commands that take long are marked slow (`python -m pytest -m slow` runs them); the ones listed
in `SKIPPED` do not run, each for the reason given.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import shlex
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rdusim.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

# Commands that do not run here, by their first words, and why.
SKIPPED = {
    "rdusim calibrate": "a calibration takes minutes; tests/test_cli_reproduce.py runs one (slow)",
}


@dataclass(frozen=True)
class Snippet:
    file: Path
    line: int  # of the opening fence
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.file.name}:{self.line}"


@dataclass(frozen=True)
class Command:
    snippet: Snippet
    line: int
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.snippet.file.name}:{self.line}:{' '.join(self.argv[:3])}"


def snippets(lang: str) -> list[Snippet]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                line = text[: m.start()].count("\n") + 1
                found.append(Snippet(path, line, lang, m.group(2)))
    return found


def commands() -> list[Command]:
    """Each `rdusim ...` command of every sh block, continuation lines joined."""
    found = []
    for s in snippets("sh"):
        joined: list[tuple[int, str]] = []
        pending: tuple[int, str] | None = None  # a command continued with `\\`
        for i, raw in enumerate(s.code.splitlines(), start=s.line + 1):
            start, text = (pending[0], pending[1] + raw) if pending else (i, raw)
            if text.rstrip().endswith("\\"):
                pending = (start, text.rstrip()[:-1] + " ")
                continue
            pending = None
            joined.append((start, text))
        for line, text in joined:
            argv = shlex.split(text, comments=True)
            if argv and argv[0] == "rdusim":
                found.append(Command(s, line, tuple(argv)))
    return found


def _slow(argv: tuple[str, ...]) -> bool:
    """Sweeps, the paper's tables, validation and serve grids take from ten seconds to a minute
    or two (a search of R1's mappings, two to three seconds, is not among them)."""
    words = " ".join(argv)
    return argv[1] in ("sweep", "reproduce", "validate") or (
        argv[1] == "serve" and ("--rate" in argv or "," in words.split("--set")[-1])
    )


def _skip_reason(argv: tuple[str, ...]) -> str | None:
    words = " ".join(argv)
    return next((why for start, why in SKIPPED.items() if words.startswith(start)), None)


def _command_params() -> list[Any]:
    params = []
    for c in commands():
        marks = [pytest.mark.slow] if _slow(c.argv) else []
        reason = _skip_reason(c.argv)
        if reason:
            marks.append(pytest.mark.skip(reason=reason))
        params.append(pytest.param(c, id=c.id, marks=marks))
    return params


@pytest.fixture
def checkout_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory with `models/` and `mappings/` linked from the checkout."""
    for name in ("models", "mappings"):
        (tmp_path / name).symlink_to(REPO_ROOT / "rdusim" / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _comments(code: str) -> dict[int, str]:
    """Line number (1-based) -> the comment that ends it."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string[1:].strip()
    return out


def _expected(comment: str) -> tuple[bool, Any]:
    """(True, value) when `comment` is a Python literal to check against, with a list ending
    in `...` meaning a prefix."""
    try:
        value = ast.literal_eval(comment)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None
    if isinstance(value, list) and Ellipsis in value[:-1]:
        return False, None
    if isinstance(value, dict | tuple | set) and "Ellipsis" in repr(value):
        return False, None
    return True, value


def _matches(value: Any, expected: Any) -> bool:
    if isinstance(expected, list) and expected and expected[-1] is Ellipsis:
        prefix = expected[:-1]
        return list(value)[: len(prefix)] == prefix
    return bool(value == expected)


@pytest.mark.parametrize("snippet", snippets("python"), ids=lambda s: s.id)
def test_python_snippet_runs_as_written(snippet: Snippet, checkout_cwd: Path) -> None:
    if "to_pandas" in snippet.code and importlib.util.find_spec("pandas") is None:
        pytest.skip("pandas is not installed (pip install -e '.[test]' brings it)")
    tree = ast.parse(snippet.code)
    comments = _comments(snippet.code)
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    where = f"{snippet.file.name}, the snippet at line {snippet.line}"
    for stmt in tree.body:
        line = snippet.line + stmt.lineno
        if isinstance(stmt, ast.Expr):
            code = compile(ast.Expression(stmt.value), where, "eval")
            value = eval(code, namespace)
            checked, expected = _expected(comments.get(stmt.end_lineno or stmt.lineno, ""))
            if checked:
                assert _matches(value, expected), (f"{where}, line {line}", value, expected)
        else:
            exec(compile(ast.Module([stmt], type_ignores=[]), where, "exec"), namespace)


@pytest.mark.parametrize("command", _command_params())
def test_sh_command_runs_as_written(
    command: Command, checkout_cwd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(list(command.argv[1:]))
    except SystemExit as exc:  # argparse refuses the command line
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 0, (command.id, out[-2000:], err[-2000:])


def test_the_snippets_are_found() -> None:
    """The collector sees the snippets the docs hold: the README's and the API guide's."""
    python = {s.file.name for s in snippets("python")}
    assert python == {"README.md", "api.md"}
    assert len(snippets("python")) >= 15
    argvs = [c.argv[1] for c in commands()]
    assert {"map", "model", "serve", "sweep"} <= set(argvs)
    # a command continued over lines is one command
    assert any("--out" in c.argv and c.argv[1] == "serve" for c in commands())


def test_what_the_snippets_import_comes_with_the_test_extra() -> None:
    """`to_pandas()` works after the documented `pip install -e '.[test]'`."""
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    test = {
        re.split(r"[\[<>=~! ]", req, maxsplit=1)[0].lower()
        for req in extras["project"]["optional-dependencies"]["test"]
    }
    if any("to_pandas" in s.code for s in snippets("python")):
        assert "pandas" in test
