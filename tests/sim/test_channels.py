"""The engine's stores and channels do what simpy's Store and PriorityResource do: the same
events in the same order, so the same simulated times to the last bit.

Two oracles: simpy's own classes driven by the same random scripts of puts, gets, requests and
releases (the order in which every process resumes, and when), and the whole engine run on
simpy's classes and environment against the same engine on these, for shipped kernels.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.api import run_mapping
from rdusim.compiler.program import Kernel, Program
from rdusim.sim import channels, engine
from rdusim.spec.hardware import Hardware

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"

# a process's script: (wait before, action, argument); actions put/get on one of two stores,
# or hold one of two channels for a while at a priority
STEP = st.tuples(
    st.sampled_from([0.0, 0.0, 0.0, 0.5]),
    st.sampled_from(["put0", "put1", "get0", "get1", "hold0", "hold0", "hold1"]),
    st.integers(0, 2),
)
SCRIPTS = st.lists(st.lists(STEP, min_size=1, max_size=8), min_size=2, max_size=8)


def _play(
    scripts, store_cls, resource_cls, capacity, env_cls=simpy.Environment
) -> list[tuple[float, int, int, str]]:
    env = env_cls()
    stores = [store_cls(env, capacity=capacity), store_cls(env)]
    links = [resource_cls(env, capacity=1), resource_cls(env, capacity=1)]
    log: list[tuple[float, int, int, str]] = []

    def proc(i: int, script):
        for j, (wait, action, arg) in enumerate(script):
            if wait:
                yield env.timeout(wait)
            which = int(action[-1])
            if action.startswith("put"):
                yield stores[which].put((i, j))
            elif action.startswith("get"):
                got = yield stores[which].get()
                log.append((env.now, i, j, f"got {got}"))
            else:
                req = links[which].request(priority=arg)
                yield req
                yield env.timeout(1.0)
                links[which].release(req)
            log.append((env.now, i, j, action))

    for i, script in enumerate(scripts):
        env.process(proc(i, script))
    env.run(until=100) if env_cls is simpy.Environment else env.run()
    return log


@given(SCRIPTS, st.sampled_from([1, 2, float("inf")]))
@settings(max_examples=200, deadline=None)
def test_random_scripts_resume_every_process_as_simpy_does(scripts, capacity):
    mine = _play(scripts, channels.Store, channels.PriorityResource, capacity)
    simpys = _play(scripts, simpy.Store, simpy.PriorityResource, capacity)
    assert mine == simpys
    # and on the engine's environment (its own timeouts and event loop) as well
    env = channels.Environment
    assert _play(scripts, channels.Store, channels.PriorityResource, capacity, env) == simpys


@cache
def _compiled(mapping: str, overrides: tuple[str, ...]) -> tuple[Program, Hardware]:
    run = run_mapping(MAPPINGS / f"{mapping}.yaml", list(overrides), simulate_it=False)
    return run.program, run.mapping.hardware


def _kernels(program: Program) -> list[Kernel]:
    seen: dict[str, Kernel] = {}
    for lp in program.all_layers():
        for k in lp.kernels:
            seen.setdefault(repr(k), k)
    return list(seen.values())


@pytest.mark.parametrize(
    ("mapping", "overrides", "iterations", "sockets"),
    [
        ("r1_prefill", ("seq_len=4096",), 1, 1),
        ("r1_decode", ("seq_len=8192", "batch=16"), 1, 2),
        ("r1_decode", ("seq_len=8192", "batch=16", "kernel_looping=false"), 3, 1),
        ("llama31_8b_decode", ("batch=1",), 3, 1),
    ],
)
def test_the_engine_on_these_channels_is_the_engine_on_simpys(
    mapping, overrides, iterations, sockets, monkeypatch
):
    program, hw = _compiled(mapping, overrides)
    for kernel in _kernels(program):
        ours = engine.simulate_pipeline(
            kernel, hw, tiles=12, iterations=iterations, sockets=sockets
        )
        with monkeypatch.context() as m:
            m.setattr(engine, "Store", simpy.Store)
            m.setattr(engine, "PriorityResource", simpy.PriorityResource)
            m.setattr(engine, "Environment", simpy.Environment)
            theirs = engine.simulate_pipeline(
                kernel, hw, tiles=12, iterations=iterations, sockets=sockets
            )
        assert repr(ours) == repr(theirs), kernel.name


def test_a_negative_timeout_is_refused_as_simpy_refuses_it() -> None:
    for env in (simpy.Environment(), channels.Environment()):
        with pytest.raises(ValueError, match="Negative delay -1"):
            env.timeout(-1)
    assert channels.Environment().timeout(0.5).env is not None
