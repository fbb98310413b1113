"""User-facing errors.

Every mistake a user can make in a spec file, on the command line or in a Python API call
becomes a `SpecError` that names the file, the key path, what is wrong and how to fix it (an API
argument of the wrong type is a `SpecTypeError`, also a `TypeError`). The CLI turns it into exit
code 2 and one readable message; a traceback is reserved for bugs in rdusim itself. The classes
are exported from `rdusim` (`rdusim.RdusimError`, `rdusim.SpecError`, ...).
"""

from __future__ import annotations

from typing import Any

# A file name longer than this is shown abbreviated, so one message stays readable.
SHOWN_NAME_CHARS = 120


def shown_path(text: str) -> str:
    """`text`, with the middle of an over-long path elided."""
    if len(text) <= SHOWN_NAME_CHARS:
        return text
    keep = SHOWN_NAME_CHARS // 2
    return f"{text[:keep]}...{text[-keep // 2 :]}"


class RdusimError(Exception):
    """Base class of the errors rdusim reports to users instead of a traceback."""


class SpecError(RdusimError):
    """A problem in a user's input, located as precisely as we can."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | None = None,
        key: str | None = None,
        line: int | None = None,
        fix: str | None = None,
        path: tuple[str | int, ...] | None = None,
    ) -> None:
        self.problem = problem
        self.path = path
        self.file = file
        self.key = key
        self.line = line
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        if self.file is None and self.key and self.key.startswith("-"):
            head = f"{self.key}: "  # a command-line option: there is no file to name
        else:
            where = shown_path(self.file) if self.file else "<input>"
            if self.line is not None:
                where += f":{self.line}"
            head = f"{where}: " + (f"{self.key}: " if self.key else "")
        text = head + self.problem
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text

    def located(self, file: str | None = None, line: int | None = None) -> SpecError:
        """A copy of this error (of the same class) with the file and line filled in where
        missing."""
        return type(self)(
            self.problem,
            file=self.file or file,
            key=self.key,
            line=self.line if self.line is not None else line,
            fix=self.fix,
            path=self.path,
            **self._extra(),
        )

    def _extra(self) -> dict[str, Any]:
        """What a subclass's copy needs beyond the location (see `located`)."""
        return {}


class InfeasibleError(SpecError):
    """A well-formed request that does not fit the machine or the workload: a batch over HBM, a
    kernel over SRAM, a cache longer than the prompt. A sweep records such a point as infeasible
    and goes on; any other user error stops it. `limit` names the socket resource a kernel
    exceeds ("SRAM", "PCUs" or "PMUs"), when that is what it is."""

    def __init__(self, problem: str, *, limit: str | None = None, **where: Any) -> None:
        super().__init__(problem, **where)
        self.limit = limit

    def _extra(self) -> dict[str, Any]:
        return {"limit": self.limit}


class SpecTypeError(SpecError, TypeError):
    """A Python API argument of the wrong type (`set="seq_len=1024"`, `layer=0`): a `SpecError`
    naming the argument and how to call it, and a `TypeError` as Python convention expects."""


class SpecErrors(RdusimError):
    """Several independent problems found in one file, reported together."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = errors
        super().__init__("\n".join(e.render() for e in errors))
