"""The run's records as columns: what goes in comes back, rows by id, and the logs in the order
an event per step would have written them."""

from __future__ import annotations

import math
from dataclasses import fields

from hypothesis import given
from hypothesis import strategies as st

from rdusim.serving.arrivals import Request
from rdusim.serving.records import (
    JOINED,
    LEFT,
    RECORD_TYPES,
    DecodeRun,
    PrefillRun,
    RecordTable,
    RequestRecord,
    RequestSet,
    RunLog,
)

times = st.one_of(st.just(math.nan), st.floats(0.0, 1e7, allow_nan=False))


def test_every_record_field_has_a_column() -> None:
    assert {f.name for f in fields(RequestRecord)} == set(RECORD_TYPES)


@given(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=20, unique=True),
    st.data(),
)
def test_a_stored_record_comes_back_as_it_was(ids: list[int], data: st.DataObject) -> None:
    requests = [Request(i, float(k), 10 + k, 2 + k, k % 3) for k, i in enumerate(ids)]
    table = RecordTable(RequestSet(requests))
    stored = {}
    for r in requests:
        if data.draw(st.booleans()):  # some complete, the others keep their defaults
            rec = RequestRecord(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.model)
            rec.graph_len, rec.prefill_node, rec.slot = data.draw(st.integers(0, 1 << 20)), 3, 7
            rec.prefill_start_s, rec.first_token_s = data.draw(times), data.draw(times)
            rec.transfer_start_s, rec.last_token_s = data.draw(times), data.draw(times)
            rec.join_step, rec.steps, rec.completions = 1 << 40, 5, 1
            table.store(rec)
            stored[r.id] = rec
    back = table.records()
    assert [b.id for b in back] == sorted(ids)
    for b in back:
        want = stored.get(b.id) or next(
            RequestRecord(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.model)
            for r in requests
            if r.id == b.id
        )
        assert repr(b) == repr(want)


def test_requests_arrive_in_time_order_the_lower_id_first() -> None:
    requests = [Request(5, 1.0, 10, 2), Request(2, 1.0, 20, 2), Request(9, 0.5, 30, 2)]
    arriving = RequestSet(requests).arriving
    assert list(arriving["id"]) == [9, 2, 5]
    assert list(arriving["prompt_tokens"]) == [30, 20, 10]
    assert RequestSet(requests).row(5) == 1  # rows in id order: 2, 5, 9


def test_decode_runs_come_in_the_order_their_first_steps_ended() -> None:
    log = RunLog()
    # recorded when they ended; the first steps ended at 2.0 (node of priority 3), 1.0, 2.0 (2)
    log.add_decode_run(DecodeRun(1, 1.5, 9.0, 5), 2.0, 3)
    log.add_decode_run(DecodeRun(0, 0.5, 3.0, 4), 1.0, 2)
    log.add_decode_run(DecodeRun(0, 1.5, 4.0, 2), 2.0, 2)
    assert [(r.node, r.start_s) for r in log.decode_runs()] == [(0, 0.5), (0, 1.5), (1, 1.5)]
    log.extend_decode_run(1, 5.0, 3)
    assert log.decode_runs()[0] == DecodeRun(0, 0.5, 5.0, 7)


def test_occupancy_changes_are_put_in_event_order() -> None:
    log = RunLog()
    log.occupied(1.0, 0, 1, 2, JOINED)
    log.occupied(3.0, 0, 0, 2, LEFT)  # a stretch's end, recorded before the join inside it
    log.occupied(2.0, 0, 2, 2, JOINED)
    log.occupied(3.0, 1, 1, 1 << 30, JOINED)  # a woken node, after the node events at 3.0
    log.occupied(3.0, 0, 1, 2, JOINED)  # joined at the boundary where one left
    log.close()
    assert log.occupancy() == [(1.0, 0, 1), (2.0, 0, 2), (3.0, 0, 0), (3.0, 0, 1), (3.0, 1, 1)]


def test_prefills_come_back_with_their_requests() -> None:
    log = RunLog()
    log.add_prefill(0, 0.0, 1.0, 128, [3, 1])
    log.add_prefill(2, 0.5, 0.75, 16, [4], model=1, chunk=2)
    assert log.prefills() == [
        PrefillRun(0, 0.0, 1.0, 128, (3, 1)),
        PrefillRun(2, 0.5, 0.75, 16, (4,), 1, 2),
    ]


def test_a_prefill_keeps_request_ids_beyond_32_bits() -> None:
    # ids are 64-bit everywhere a run keeps them (the record table's too)
    log = RunLog()
    big = [2**31, 2**40 + 7]
    log.add_prefill(0, 1.0, 2.0, 4096, big)
    (run,) = log.prefills()
    assert run.requests == tuple(big)
