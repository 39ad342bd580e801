"""Loading what a run tunes, on rank 0: a spec file under a deadline, or a replay's measured data.

The checks here refuse a mix-up in one line: a results file given as the spec, or a replay into
another strategy's file."""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from mpitune.errors import SpecError, UserError
from mpitune.store.files import refuse_inputs

if TYPE_CHECKING:
    from mpitune.model.problem import Problem, RunSettings
    from mpitune.spec.replay import MeasuredSpace
    from mpitune.spec.settings import Overrides

T = TypeVar("T")

# Spec paths that are surely data, not Python: the usual mix-up is passing the results file.
_DATA_SUFFIXES = (".h5", ".hdf5", ".json", ".gz")


def problem_of_args(args: argparse.Namespace) -> tuple[Problem, RunSettings]:
    from mpitune.spec import load

    return load.load_spec(args.spec, overrides(args), read_measured)


def replay_of_args(args: argparse.Namespace) -> tuple[Problem, RunSettings]:
    """The replay the command line asks for, of one measured file or several (``args.caches``).

    The first file is read last: the store keeps the file it read last, and rank 0 replays the first."""
    from mpitune.spec.replay import replay_problem

    first, *others = args.caches
    more = [read_measured(path) for path in others]
    loaded = replay_problem(
        read_measured(first),
        overrides(args),
        args.strategy,
        device_bias=args.device_bias,
        device_bias_sd=args.device_bias_sd,
        kernel_cache=args.kernel_cache,
        more=more,
    )
    return unmixed(loaded, args.append)


def warm_replay(args: argparse.Namespace) -> object:
    """This rank's measured data, read while MPI starts. Its replay backend then finds it parsed.

    World rank r replays file r % k of the k files given (``ReplaySource.replayed_by``)."""
    from mpitune.scheduling.before_mpi import launcher_world_rank

    return read_measured(args.caches[(launcher_world_rank() or 0) % len(args.caches)])


class _LoadDeadline(BaseException):
    """Raised by SIGALRM in whatever the spec was running. It is no Exception, so that the spec's
    own ``except Exception`` cannot swallow it."""


# How often the load deadline's alarm rings, and how long each ring leaves the GIL to others.
_YIELD_S = 0.25
_HANDOVER_S = 0.002
# Why a step of rank 0's loading overran --load-timeout, by the spec field it names.
_LATE = {
    "loading": "did not finish within {:g} s (an endless loop?)",
    "restrictions": "the search space was not built within {:g} s "
    "(a restriction too costly to evaluate, or too many configurations?)",
}


def within(seconds: float, spec: str, work: Callable[[], T], field: str = "loading", hand_over: bool = False) -> T:
    """``work()`` under a deadline, on rank 0, in the main thread.

    A spec that loops forever ends the job with one line. So does a search space whose
    restrictions take as long. Else every rank would wait until the job's time limit.
    ``field``: the step, as the line names it.

    With ``hand_over`` the alarm rings every ``_YIELD_S`` until the deadline. One Python
    operation on huge integers (``p["x"] ** 10**10`` in a callable restriction) holds the GIL
    throughout. It holds the heartbeat thread too, so the other ranks would take rank 0 for lost.
    But it checks for signals as it goes, and each ring gives the GIL up for a moment. There is
    no hand-over while the spec's own code runs. Each ring interrupts a system call, and C code
    reading a file with stdio (``np.fromfile``) does not retry it."""
    end_s = time.monotonic() + seconds
    rang_out = False

    def ring(signum, frame):
        nonlocal rang_out
        if rang_out:
            return  # a ring that was on its way: the deadline is already unwinding ``work``
        if not hand_over or time.monotonic() >= end_s:
            rang_out = True
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise _LoadDeadline
        time.sleep(_HANDOVER_S)  # releases the GIL

    previous = signal.signal(signal.SIGALRM, ring)
    if hand_over:
        signal.setitimer(signal.ITIMER_REAL, max(min(seconds, _YIELD_S), 1e-3), _YIELD_S)
    else:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        return work()
    except _LoadDeadline:
        late = _LATE[field].format(seconds)
        raise SpecError(os.path.abspath(spec), field, f"{late}; --load-timeout S allows longer") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def overrides(args: argparse.Namespace) -> Overrides:
    """What the flags set (spec/settings_table.py), and the results file, ``--out``."""
    from mpitune.spec.settings import Overrides
    from mpitune.spec.settings_table import from_flags

    return Overrides(**from_flags(args), cache_path=args.out)


def not_python(path: str) -> str | None:
    """Why SPEC is surely not a spec file (a results file, a Kernel Tuner cache), or None.

    Python would say "source code string cannot contain null bytes" about an HDF5 file."""
    if not os.path.isfile(path):
        return None  # the spec loader says "no such file", naming the field
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if not path.lower().endswith(_DATA_SUFFIXES) and b"\0" not in head:
        return None
    hint = " (a results file: python -m mpitune report, or replay, reads it)" if head.startswith(b"\x89HDF") else ""
    return f"{path} is not a Python spec file{hint}"


def unmixed(loaded: tuple[Problem, RunSettings], append: bool) -> tuple[Problem, RunSettings]:
    """``loaded``, unless its replay would go into a file of another strategy's results.

    Such a replay would start knowing them. It is refused unless ``append`` asks for it. A real
    run's file is its resume cache: never refused. The measured data itself (any of its files) as
    the results file is refused first, whatever ``append`` says."""
    problem, settings = loaded
    replay = problem.kernel.replay
    inputs = [] if replay is None else [f.path for f in replay.files] or [replay.path]
    refuse_inputs(settings.cache_path, *inputs)
    if problem.kernel.replay and not append and os.path.exists(settings.cache_path):
        from mpitune.store.reader import read  # reads HDF5: only when there is a file to read

        try:
            recorded = set(read(settings.cache_path).runs["strategy"].tolist())
        except UserError:
            return loaded  # not an mpitune file: the writer refuses it with its own line
        others = sorted(recorded - {settings.strategy})
        if others:
            raise UserError(
                f"{settings.cache_path} holds the replay of strategy {', '.join(others)}; replaying "
                f"{settings.strategy} into it would mix the two: name another --out, or pass --append"
            )
    return loaded


def read_measured(path: str) -> MeasuredSpace:
    from mpitune.store import measured  # reads HDF5 files: imported only when a replay needs it

    return measured.load_shared(path)  # the replay backend reads the same data: parsed once
