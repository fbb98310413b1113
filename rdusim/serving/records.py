"""What a serving run records: each request's path, and the graph executions of each node.

A request in flight is a `RequestRecord` the engine updates; once it completes, its fields are
copied into the run's `RecordTable` (a column per field, a row per request, in id order) and the
object is let go, so a run of a million requests holds columns of numbers, not a million
objects, and the metrics work on whole columns (`rdusim.serving.metrics`).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from rdusim.serving.arrivals import Request, Requests

NAN = float("nan")


@dataclass(slots=True)
class RequestRecord:
    """One request's path through the deployment; NaN or -1 where it did not pass."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    model: int = 0  # index of the model it asks for
    graph_len: int = 0  # the prefill graph it ran on
    prefill_node: int = -1
    prefill_start_s: float = NAN
    first_token_s: float = NAN
    decode_node: int = -1  # colocated: its node
    slot: int = -1
    slot_from_s: float = NAN  # when its slot was reserved
    transfer_start_s: float = NAN  # disaggregated: its cache on the link
    transfer_end_s: float = NAN
    last_token_s: float = NAN  # also when its slot frees
    join_step: int = -1  # decode steps its node had run when it joined
    steps: int = 0  # decode steps it took
    completions: int = 0  # times it completed (exactly once, or the engine has a bug)

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.last_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None for a one-token output)."""
        if self.output_tokens <= 1:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class PrefillRun:
    node: int
    start_s: float
    end_s: float
    graph_len: int
    requests: tuple[int, ...]
    model: int = 0
    chunk: int = -1  # chunked prefill: which chunk of the prompts (-1: whole prompts)


@dataclass
class DecodeRun:
    """Consecutive decode steps of one node's batch of one model, merged."""

    node: int
    start_s: float
    end_s: float
    steps: int
    model: int = 0


@dataclass(frozen=True)
class SwitchRun:
    """A node loading `model`'s weights into HBM, in place of the `evicted` models."""

    node: int
    start_s: float
    end_s: float
    model: int
    evicted: tuple[int, ...]


class RunLog:
    """What the nodes did, appended as it happens, as columns: each prefill graph execution,
    each run of consecutive decode steps of one batch, each change of a batch's occupied slots,
    and the model switches. `prefills()`, `decode_runs()` and `occupancy()` give them as
    objects."""

    def __init__(self) -> None:
        self.prefill = _columns(PREFILL_COLUMNS)
        self.prefill_ids = array("q")  # each prefill's requests, one after the other
        self.decode = _columns(DECODE_COLUMNS)
        self.changes = _columns(OCCUPANCY_COLUMNS)
        self.switches: list[SwitchRun] = []
        self.slot_steps = 0  # occupied slots summed over every decode step
        self.decode_steps = 0
        # the columns appended to as a run goes, in their tables' order (a lookup each less)
        self._prefill_row = tuple(self.prefill.values())
        self._change_row = tuple(self.changes.values())
        self._decode_end, self._decode_steps = self.decode["end_s"], self.decode["steps"]

    def add_prefill(
        self,
        node: int,
        start_s: float,
        end_s: float,
        graph_len: int,
        requests: Sequence[int],
        model: int = 0,
        chunk: int = -1,
    ) -> None:
        """Record a prefill graph execution (a `PrefillRun`)."""
        nodes, starts, ends, graphs, models, chunks, counts = self._prefill_row
        nodes.append(node)
        starts.append(start_s)
        ends.append(end_s)
        graphs.append(graph_len)
        models.append(model)
        chunks.append(chunk)
        counts.append(len(requests))
        self.prefill_ids.extend(requests)

    def add_decode_run(self, run: DecodeRun, first_s: float, priority: int) -> int:
        """Record a new run of decode steps whose first step ended at `first_s` (its node's
        `priority` orders runs whose first steps ended together); its index."""
        c = self.decode
        c["node"].append(run.node)
        c["start_s"].append(run.start_s)
        c["end_s"].append(run.end_s)
        c["steps"].append(run.steps)
        c["model"].append(run.model)
        c["first_s"].append(first_s)
        c["priority"].append(priority)
        return len(c["node"]) - 1

    def decode_end_s(self, index: int) -> float:
        return self._decode_end[index]

    def extend_decode_run(self, index: int, end_s: float, steps: int) -> None:
        """Run `steps` more steps, to `end_s`, in the decode run `index`."""
        self._decode_end[index] = end_s
        self._decode_steps[index] += steps

    def occupied(self, time: float, batch: int, occupied: int, priority: int, kind: int) -> None:
        """Decode batch `batch` holds `occupied` requests from `time` on, after requests left
        or joined (`kind`) in an event of `priority` (the change's place at its instant)."""
        times, batches, counts, priorities, kinds = self._change_row
        times.append(time)
        batches.append(batch)
        counts.append(occupied)
        priorities.append(priority)
        kinds.append(kind)

    def close(self) -> None:
        """Put the occupancy changes in the order they happened: by time, then the priority of
        the event, requests leaving before others join (changes recorded at the end of a run of
        steps taken as one event come after later ones otherwise)."""
        c = self.changes
        keys = [self.column("changes", name) for name in ("kind", "priority", "time")]
        order = np.lexsort(keys)
        if np.any(order != np.arange(len(order))):
            for name, v in c.items():
                ordered = array(v.typecode)
                ordered.frombytes(np.frombuffer(v, dtype=_typed(v))[order].tobytes())
                c[name] = ordered
            self._change_row = tuple(c.values())

    def column(self, table: str, name: str) -> np.ndarray:
        """A column of `prefill`, `decode` or `changes`, as numpy (a view: do not write)."""
        data = getattr(self, table)[name]
        return np.frombuffer(data, dtype=_typed(data))

    def prefills(self) -> list[PrefillRun]:
        """Every prefill graph execution, in the order they ended."""
        c = {k: v.tolist() for k, v in self.prefill.items()}
        ids = self.prefill_ids.tolist()
        ends = list(itertools.accumulate(c["requests"]))
        return [
            PrefillRun(node, start, end, n, tuple(ids[stop - k : stop]), model, chunk)
            for node, start, end, n, model, chunk, k, stop in zip(
                c["node"],
                c["start_s"],
                c["end_s"],
                c["graph_len"],
                c["model"],
                c["chunk"],
                c["requests"],
                ends,
                strict=True,
            )
        ]

    def decode_runs(self) -> list[DecodeRun]:
        """The runs of decode steps in the order their first steps ended (at one instant, in
        node order): the order an event per step records them in."""
        c = {k: v.tolist() for k, v in self.decode.items()}
        order = sorted(range(len(c["node"])), key=lambda i: (c["first_s"][i], c["priority"][i]))
        return [
            DecodeRun(c["node"][i], c["start_s"][i], c["end_s"][i], c["steps"][i], c["model"][i])
            for i in order
        ]

    def occupancy(self) -> list[tuple[float, int, int]]:
        """(time, batch, occupied) at each change, in the order they happened."""
        c = self.changes
        return list(
            zip(c["time"].tolist(), c["batch"].tolist(), c["occupied"].tolist(), strict=True)
        )


# column types: "d" a float, "q" a 64-bit int, "i" a 32-bit int (ids, counts, small numbers)
PREFILL_COLUMNS = {
    "node": "i",
    "start_s": "d",
    "end_s": "d",
    "graph_len": "i",
    "model": "i",
    "chunk": "i",
    "requests": "i",  # how many
}
DECODE_COLUMNS = {
    "node": "q",
    "start_s": "d",
    "end_s": "d",
    "steps": "q",
    "model": "q",
    "first_s": "d",  # when its first step ended
    "priority": "q",  # its node's event priority
}
OCCUPANCY_COLUMNS = {"time": "d", "batch": "i", "occupied": "i", "priority": "i", "kind": "i"}
# a record's fields as columns (steps count a batch's global steps: 64 bits)
RECORD_TYPES = {
    "id": "q",
    "arrival_s": "d",
    "prompt_tokens": "q",
    "output_tokens": "q",
    "model": "q",
    "graph_len": "i",
    "prefill_node": "i",
    "prefill_start_s": "d",
    "first_token_s": "d",
    "decode_node": "i",
    "slot": "i",
    "slot_from_s": "d",
    "transfer_start_s": "d",
    "transfer_end_s": "d",
    "last_token_s": "d",
    "join_step": "q",
    "steps": "q",
    "completions": "i",
}
NUMPY_TYPES = {"d": np.float64, "q": np.int64, "i": np.int32}
LEFT, JOINED = 0, 1  # an occupancy change: requests completed, or requests joined


def _typed(data: array[Any]) -> type:
    return NUMPY_TYPES[data.typecode]


def _columns(types: dict[str, str]) -> dict[str, array[Any]]:
    return {name: array(code) for name, code in types.items()}


SUBMITTED = ("id", "arrival_s", "prompt_tokens", "output_tokens", "model")
RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))
WRITTEN = tuple(name for name in RECORD_FIELDS if name not in SUBMITTED)  # by the run


class RequestSet:
    """The requests of a run, ready for the engine: as columns in id order (`columns`) and in
    arrival order (`arriving`), shared by every run of the same requests (a point and its
    intervals' runs), with the accepted-token draws once made (`drawn`)."""

    def __init__(self, requests: Requests | Sequence[Request]) -> None:
        given = requests if isinstance(requests, Requests) else Requests.of(requests)
        columns = {name: getattr(given, name) for name in SUBMITTED}
        by_id = np.argsort(columns["id"], kind="stable")
        self.columns = {name: column[by_id] for name, column in columns.items()}
        for column in self.columns.values():
            column.flags.writeable = False
        by_arrival = np.lexsort((columns["id"], columns["arrival_s"]))
        self.arriving = {  # each request's fields, in arrival order (the earlier id first)
            name: array(RECORD_TYPES[name], column[by_arrival].tobytes())
            for name, column in columns.items()
        }
        ids = self.columns["id"]
        dense = bool(np.array_equal(ids, np.arange(len(ids))))
        # a request's row: its id, unless the ids are not 0, 1, ... n - 1
        self.rows: dict[int, int] | None = None if dense else {int(i): k for k, i in enumerate(ids)}
        self.drawn: dict[object, Sequence[int] | None] = {}  # decode steps per row, by draw

    def __len__(self) -> int:
        return len(self.columns["id"])

    def row(self, request_id: int) -> int:
        return request_id if self.rows is None else self.rows[request_id]


class RecordTable:
    """Every request's record as columns, a row per request in id order: what it was
    submitted with, and what the run wrote when it completed (`store`)."""

    def __init__(self, requests: RequestSet) -> None:
        self.requests = requests
        n = len(requests)
        defaults = RequestRecord(0, 0.0, 0, 0)
        self._written = {
            name: array(RECORD_TYPES[name], [getattr(defaults, name)]) * n
            for name in RECORD_FIELDS
            if name not in SUBMITTED
        }
        self._row = tuple(self._written[name] for name in WRITTEN)  # `store`'s order

    def __len__(self) -> int:
        return len(self.requests)

    def store(self, rec: RequestRecord) -> None:
        """Write a completed request's record into its row."""
        rows = self.requests.rows
        i = rec.id if rows is None else rows[rec.id]
        (graph, prefill_node, prefill_start, first, node, slot, slot_from, sent, received,
         last, join, steps, completions) = self._row  # fmt: skip
        graph[i] = rec.graph_len
        prefill_node[i] = rec.prefill_node
        prefill_start[i] = rec.prefill_start_s
        first[i] = rec.first_token_s
        node[i] = rec.decode_node
        slot[i] = rec.slot
        slot_from[i] = rec.slot_from_s
        sent[i] = rec.transfer_start_s
        received[i] = rec.transfer_end_s
        last[i] = rec.last_token_s
        join[i] = rec.join_step
        steps[i] = rec.steps
        completions[i] = rec.completions

    def column(self, name: str) -> np.ndarray:
        """One field of every request, in id order (a view of the table: do not write)."""
        given = self.requests.columns.get(name)
        if given is not None:
            return given
        return np.frombuffer(self._written[name], dtype=_dtype(name))

    def records(self) -> list[RequestRecord]:
        """Every request's record as an object, in id order (built on each call)."""
        columns = [self.column(name).tolist() for name in RECORD_FIELDS]
        return [RequestRecord(*row) for row in zip(*columns, strict=True)]


def _dtype(name: str) -> type:
    return NUMPY_TYPES[RECORD_TYPES[name]]
