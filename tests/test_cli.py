"""The command line's parser: every option and argument of every command says what it does."""

from __future__ import annotations

import argparse

import pytest

from rdusim.cli import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_option_and_argument_has_help(command: str) -> None:
    parser = _commands()[command]
    undocumented = [
        a.option_strings[0] if a.option_strings else a.dest
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
    ]
    assert not undocumented, f"rdusim {command}: no help for {undocumented}"


def test_model_help_names_phase_batch_and_their_defaults(run_cli) -> None:
    code, out, _ = run_cli(["model", "--help"])
    flat = " ".join(out.split())
    assert code == 0
    assert "decode (one token per sequence against the cache" in flat
    assert "(default: prefill)" in flat and "(default: 4096)" in flat and "(default: 1)" in flat


def test_reproduce_help_names_its_targets(run_cli) -> None:
    code, out, _ = run_cli(["reproduce", "--help"])
    flat = " ".join(out.split())
    assert code == 0
    assert "{table4,table5,all}" in flat  # the targets
    assert "(default: all: both" in flat  # and which one runs without a target
    assert "--out DIR" in flat and "(default: reproduce/)" in flat
    assert "--hardware PRESET_OR_FILE" in flat
    code, _, err = run_cli(["reproduce", "table6"])
    assert code == 2 and "invalid choice: 'table6'" in err


def test_a_command_collects_garbage_less_often_and_the_same_answer_comes_out(run_cli) -> None:
    """`main` raises the collector's first threshold (to `GC_THRESHOLD`, never lowering one a
    caller set higher); a report is the same whatever it is."""
    import gc

    from rdusim.cli import GC_THRESHOLD

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        code, out, _ = run_cli(["map", "llama31_8b_decode", "--set", "batch=1", "--json"])
        assert code == 0 and gc.get_threshold()[0] == GC_THRESHOLD
        gc.set_threshold(GC_THRESHOLD * 10, *before[1:])
        again = run_cli(["map", "llama31_8b_decode", "--set", "batch=1", "--json"])
        assert gc.get_threshold()[0] == GC_THRESHOLD * 10
        assert again[1] == out
    finally:
        gc.set_threshold(*before)


def test_a_command_asks_blas_for_one_thread_unless_the_user_chose() -> None:
    """`main` sets each BLAS thread variable the user left unset to 1, before numpy loads in a
    fresh process, and leaves a user's own value alone."""
    import os
    import subprocess
    import sys

    from rdusim.cli import BLAS_THREAD_VARIABLES

    probe = (
        "import os, sys\n"
        "from rdusim.cli import main\n"
        "main(['--version'])\n"
        "print(','.join(os.environ[n] for n in sys.argv[1:]), 'numpy' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    env["MKL_NUM_THREADS"] = "3"
    done = subprocess.run(
        [sys.executable, "-c", probe, *BLAS_THREAD_VARIABLES],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split()[-2:] == ["1,3,1", "False"]


def test_serve_keeps_pythons_collector_threshold(run_cli, tmp_path) -> None:
    """`serve` runs with the collector's threshold as it found it (see `GC_THRESHOLD`)."""
    import gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        code, _, err = run_cli(
            [
                "serve",
                "--prefill",
                "llama31_8b_prefill",
                "--decode",
                "llama31_8b_decode",
                "--workload",
                "trace_example",
                "--json",
            ]
        )
        assert code == 0, err
        assert gc.get_threshold()[0] == 700
    finally:
        gc.set_threshold(*before)
