"""``python -m mpitune plan`` where it is pushed: rank counts past what it simulates or what there is
to measure, a plan ended by Ctrl-C or SIGTERM, a pilot of which nothing passed, and a run's file
that holds part of its search. Each ends in one line, and leaves nothing behind."""

import json
import os
import signal
import subprocess
import sys
import time
import weakref
from functools import partial

import pytest
from conftest import kt_cache, mpi_env, write_scale_spec

from mpitune.cli import main
from mpitune.cli.plan_basis import MAX_RANKS
from mpitune.cli.planning import _terminable
from mpitune.scheduling.run import tune
from mpitune.scheduling.transport import LocalTransport
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


def test_ten_million_ranks_are_refused_at_once_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "mpitune", "plan", "nowhere.json", "--ranks", "8,10000000"],
        capture_output=True,
        text=True,
        env=mpi_env(),
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"10,000,000 ranks: plan simulates every rank in this one process, at most {MAX_RANKS:,}" in done.stderr


def test_more_ranks_than_configurations_are_refused_and_the_defaults_trimmed(tmp_path, capsys):
    source = kt_cache(str(tmp_path / "c.json"))  # 6 configurations
    assert main(["plan", source, "--ranks", "1,2", "7", "--json"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"--ranks 7: more ranks than the 6 configurations {source} holds" in error
    assert main(["plan", source, "--ranks", "4", "--max-fevals", "3"]) == 2
    assert "--ranks 4: more ranks than the 3 configurations of --max-fevals 3" in capsys.readouterr().err
    # Space-separated counts, as comma-separated ones; the default (1, 8, 64) keeps those not above 6.
    assert main(["plan", source, "--ranks", "2", "6", "--json"]) == 0
    assert [r["ranks"] for r in json.loads(capsys.readouterr().out)["ranks"]] == [2, 6]
    assert main(["plan", source, "--json"]) == 0
    assert [r["ranks"] for r in json.loads(capsys.readouterr().out)["ranks"]] == [1]


def _started(args, tmp_path):
    """A plan in a child with its own temporary folder, once that folder holds its own."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**mpi_env(), "TMPDIR": str(temp)}
    child = subprocess.Popen(
        [sys.executable, "-m", "mpitune", "plan", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 120
    while not list(temp.glob("mpitune-plan-*")) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # into its replays
    assert child.poll() is None, child.communicate()
    return child, temp


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_a_plan_in_one_line_and_removes_its_temporary_folder(tmp_path, pnpoly, sig):
    child, temp = _started([str(pnpoly), "--ranks", "1,64,512"], tmp_path)
    child.send_signal(sig)
    out, err = child.communicate(timeout=120)
    text = err.decode()
    assert "Traceback" not in text and text.count("\n") == 1 and out == b""
    if sig == signal.SIGINT:
        assert child.returncode == 130 and "mpitune: plan: interrupted: nothing planned (exit code 130)" in text
    else:  # ended by SIGTERM itself, as its parent expects
        assert child.returncode == -signal.SIGTERM and "mpitune: plan: ended by SIGTERM" in text
    assert list(temp.iterdir()) == []


def test_a_ctrl_c_that_a_finaliser_swallowed_still_ends_the_plan(capsys):
    """Python only prints an exception raised in a weak reference's callback and goes on: the
    interrupt is delivered again, after it, and nothing is printed."""

    class Thing:
        pass

    with pytest.raises(KeyboardInterrupt), _terminable():
        thing = Thing()
        ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGINT))
        del thing
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the second delivery ends this
            time.sleep(0.01)
    assert ref() is None
    assert "Exception ignored" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_pilot_that_compiled_nothing_says_so_and_names_no_temporary_file(tmp_path, capsys):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4], "MODE": [1]}')  # MODE 1 fails to compile
    assert main(["plan", str(spec), "--pilot", "3", "--ranks", "1,2"]) == 2
    printed = capsys.readouterr().err
    assert "mpitune-plan-" not in printed and "pilot.h5" not in printed  # its progress lines too
    error = printed.splitlines()[-1]
    # The compiler's first line, without the pilot's build folder, gone too.
    assert error.startswith("mpitune: error: all 3 configurations of the pilot failed to compile: kernel.c:")
    assert "MODE 1 is a configuration that does not compile" in error and "/tmp" not in error


def _run(pnpoly, out, **budget):
    """A one-rank replay of pnpoly (4,092 configurations) into ``out`` under ``budget``."""
    load = partial(replay_problem, measured.load(str(pnpoly)), Overrides(cache_path=str(out), **budget), "brute_force")
    tune(load, "", transport=LocalTransport())
    return measured.load(str(out))


def test_a_run_stopped_short_is_refused_with_the_command_that_plans_its_whole_space(tmp_path, pnpoly, capsys):
    stopped = tmp_path / "stopped.h5"
    held = len(_run(pnpoly, stopped, time_limit_s=5.0).configs)
    assert 2 <= held < 4092
    assert main(["plan", str(stopped), "--ranks", "1,2"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"{stopped} holds {held:,} of the 4,092 configurations of its search space" in error
    assert "its last run stopped early: time_limit" in error and "a plan from it plans only those" in error
    assert f"`plan SPEC.py --prior {stopped}` plans the whole space" in error
    assert main(["plan", str(stopped), "--max-fevals", str(held + 1)]) == 2
    assert f"cannot plan --max-fevals {held + 1:,} from them" in capsys.readouterr().err
    # Asked for a run of as many as it holds: planned, and the line says on what.
    assert main(["plan", str(stopped), "--ranks", "1,2", "--max-fevals", str(held), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["configurations"] == held
    assert f"{held:,} of the 4,092 configurations of its search space" in planned["rests_on"]
    assert f"a run of {held:,} of them as asked" in planned["rests_on"]


def test_a_run_that_ended_on_its_budget_is_planned_and_says_its_share(tmp_path, pnpoly, capfd):
    ended = tmp_path / "ended.h5"
    assert len(_run(pnpoly, ended, max_fevals=12).configs) == 12
    capfd.readouterr()  # the run's own lines
    assert main(["plan", str(ended), "--ranks", "1,3", "--json"]) == 0
    planned = json.loads(capfd.readouterr().out)
    assert planned["configurations"] == 12 and [r["ranks"] for r in planned["ranks"]] == [1, 3]
    assert "12 of the 4,092 configurations of its search space (its search ended there)" in planned["rests_on"]
    assert os.path.exists(ended)
