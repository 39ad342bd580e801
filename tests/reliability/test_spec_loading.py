"""Class 7: specs that misbehave while loading end the job promptly with one line, and what
they leave behind (a thread, a changed folder) costs neither the results nor the exit."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from conftest import mpitune, write_scale_spec

from mpitune.store.reader import read

# name -> (module-level code appended to a working spec, words of the one line)
REFUSED = {
    "os_exit": ("import os\nos._exit(0)\n", "line 15: calls os._exit(0) while loading"),
    "os_abort": ("import os\nos.abort()\n", "calls os.abort() while loading"),
    "sys_exit_0": ("import sys\nsys.exit(0)\n", "line 15: calls sys.exit(0) while loading"),
    "system_exit_3": ("raise SystemExit(3)\n", "line 14: calls sys.exit(3) while loading"),
    "keyboard_interrupt": ("raise KeyboardInterrupt\n", "line 14: interrupted while loading"),
    "fork": ("import os, time\nif os.fork() == 0:\n    time.sleep(30)\n", "calls os.fork() while loading"),
    "endless_loop": ("while True:\n    pass\n", "loading: did not finish within 2 s"),
    # Loaded in time, its restriction then overruns the deadline while the space is built.
    "endless_restriction": (
        "restrictions = [lambda p: any(i < 0 for i in range(10**10))]\n",
        "restrictions: the search space was not built within 2 s (a restriction too costly to evaluate, or too many",
    ),
    "endless_loop_catching": (
        "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except Exception:\n        pass\n",
        "loading: did not finish within 2 s",
    ),
}


def _run(tmp_path: Path, code: str, name: str = "spec", flags: tuple[str, ...] = ()) -> tuple:
    spec = write_scale_spec(tmp_path, extra=code)
    if name != "spec":
        spec = spec.rename(tmp_path / f"{name}.py")
    started = time.monotonic()
    proc = mpitune(2, [str(spec), *flags], tmp_path, timeout=60)
    return proc, time.monotonic() - started, spec


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_misbehaving_spec_ends_the_job_with_one_line(tmp_path, case):
    code, words = REFUSED[case]
    flags = ("--load-timeout", "2") if case.startswith("endless") else ()  # the default, 60 s, elsewhere
    proc, took, spec = _run(tmp_path, code, flags=flags)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mpitune: error: {spec}: ") and words in lines[0], proc.stderr
    assert took < 15, took  # start-up of two ranks, the 2 s deadline, and the way out
    assert not (tmp_path / "spec.h5").exists()


def test_a_restriction_holding_the_interpreter_is_not_taken_for_a_lost_rank(tmp_path):
    """One huge integer power holds the GIL, and with it rank 0's heartbeat thread, for as long as
    it computes: rank 1 called rank 0 lost after the liveness timeout. The deadline's alarm now
    hands the GIL over as it rings, and then ends the job with the true line."""
    code = 'restrictions = [lambda p: p["STEP"] ** (10**10) > 1]\n'
    proc, took, spec = _run(tmp_path, code, flags=("--liveness-timeout", "2", "--load-timeout", "5"))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "lost" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == (
        f"mpitune: error: {spec}: restrictions: the search space was not built within 5 s "
        "(a restriction too costly to evaluate, or too many configurations?); --load-timeout S allows longer"
    ), proc.stderr
    assert took < 25, took


def test_chdir_in_the_spec_does_not_move_the_cache(tmp_path):
    name = f"chdir_{uuid.uuid4().hex[:12]}"
    stray = Path("/") / f"{name}.h5"
    try:
        proc, took, _ = _run(tmp_path, 'import os\nos.chdir("/")\n', name=name)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and "changed the working directory" in proc.stderr
        assert not stray.exists()
        assert took < 30, took
        assert len(read(str(tmp_path / f"{name}.h5")).results) == 4
    finally:
        for leftover in (stray, stray.with_name(stray.name + ".lock")):
            leftover.unlink(missing_ok=True)


def test_a_thread_the_spec_leaves_running_does_not_hold_the_job(tmp_path):
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), name='spec-sleeper').start()\n"
    proc, took, _ = _run(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "not waiting for thread(s) the spec started: spec-sleeper" in proc.stderr
    assert took < 30, took
    assert len(read(str(tmp_path / "spec.h5")).results) == 4  # everything recorded before leaving
