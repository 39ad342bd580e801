"""Command line: ``python -m mpitune [tune] SPEC [flags]`` tunes under MPI, ``replay DATA`` replays
measured data, and ``python -m mpitune VERB ...`` runs an offline verb from ``mpitune.commands``
(report, ...), which needs neither MPI nor a GPU.

Errors the user can fix end every rank with one line on stderr and exit code 2;
``--debug`` shows the traceback behind it. Every output path is ``--out``; the older ``--cache``
(tune) and ``--output`` (replay) stay as aliases so that scripts keep working.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from mpitune import __version__, commands
from mpitune.errors import EXIT_USER_ERROR, SpecError, UserError
from mpitune.spec.peek import named_lang
from mpitune.store.write_errors import EXIT_CANNOT_WRITE, cannot_write

# numpy and what needs it are imported where used: a tuning rank spawns its worker process
# first (scheduling/early.py), and every import before that spawn delays the worker.
if TYPE_CHECKING:
    from mpitune.model.problem import Problem, RunSettings
    from mpitune.scheduling.loop import Guard
    from mpitune.spec.replay import MeasuredSpace
    from mpitune.spec.settings import Overrides

LOAD_TIMEOUT_S = 60.0  # how long a spec may take to load (run its module, pass its checks)


TUNE_HELP = "tune the kernel a spec file describes on every MPI rank (the default: python -m mpitune SPEC)"
REPLAY_HELP = "replay a search on measured data (Kernel Tuner JSON cache or mpitune .h5) with simulated time"
# Exit code after the reader of standard output went away (``report ... | head``), as a shell
# reports a process that SIGPIPE ended: 128 + 13.
EXIT_CLOSED_PIPE = 141
# Spec paths that are surely data, not Python: the usual mix-up is passing the results file.
_DATA_SUFFIXES = (".h5", ".hdf5", ".json", ".gz")


def _refuse(message: str) -> int:
    """A user error before MPI starts: every rank exits 2, the first alone says why (each
    rank of a launcher that does not say which it is)."""
    from mpitune.scheduling.early import launcher_world_rank

    if launcher_world_rank() in (0, None):
        print(f"mpitune: error: {message}", file=sys.stderr)
    return EXIT_USER_ERROR


class _Parser(argparse.ArgumentParser):
    """Under mpiexec every rank parses the same flags: a bad one ends each rank with exit
    code 2, and the first rank alone says why, in one line, as every other user error."""

    def error(self, message: str):
        self.exit(_refuse(f"{message} (see {self.prog} --help)"))


def _subcommands() -> str:
    """Every subcommand with its one line, for the top-level ``--help``."""
    lines = {"tune": TUNE_HELP, "replay": REPLAY_HELP}
    lines.update({verb: commands.load(verb).HELP for verb in sorted(commands.available())})
    width = max(map(len, lines))
    return (
        "commands:\n"
        + "\n".join(f"  {verb:<{width}}  {text}" for verb, text in lines.items())
        + ("\n\n'python -m mpitune COMMAND --help' shows a command's flags.")
    )


def _tune_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mpitune",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tune the kernel described by SPEC on every MPI rank: "
        "mpiexec -n RANKS python -m mpitune [tune] SPEC [flags].",
        epilog=_subcommands(),
    )
    p.add_argument("--version", action="version", version=f"mpitune {__version__}")
    p.add_argument("spec", help="the spec file (Python, Kernel Tuner's tune_kernel names)")
    p.add_argument(
        "--out",
        "--cache",
        dest="out",
        metavar="PATH",
        help="HDF5 results file (default: SPEC's name with .h5, here; --cache is the older name)",
    )
    p.add_argument(
        "--load-timeout",
        type=float,
        default=LOAD_TIMEOUT_S,
        metavar="S",
        help=f"give up when the spec takes longer than S seconds to load (default {LOAD_TIMEOUT_S:g})",
    )
    _search_flags(p, "seconds")
    return p


def _search_flags(p: argparse.ArgumentParser, seconds: str) -> None:
    """The flags that override a search's strategy, budget and batching."""
    p.add_argument("--strategy", help="search strategy (default: as the spec says, see docs/spec.md)")
    p.add_argument("--max-fevals", type=int, help="at most this many new configurations")
    p.add_argument("--time-limit", type=float, metavar="S", help=f"stop handing out batches after S {seconds}")
    p.add_argument("--seed", type=int, help="seed of the strategy's random numbers")
    p.add_argument(
        "--batch-size", type=int, help="configurations per round (default: see docs/performance.md, 'Batches')"
    )
    p.add_argument(
        "--compile-workers",
        type=int,
        metavar="N",
        help="processes per rank compiling ahead while the device measures "
        "(default: the rank's cores minus one; 0: compile each configuration in turn)",
    )
    p.add_argument(
        "--stop-file",
        metavar="PATH",
        help="stop as on SIGTERM once PATH exists (job scripts touch it when Slurm signals)",
    )
    p.add_argument(
        "--no-isolation",
        action="store_true",
        help="measure in the rank's own process: no per-configuration deadline, a crash ends the job",
    )
    p.add_argument(
        "--rank-deadline-floor",
        type=float,
        metavar="S",
        help="wait at least S seconds for a rank's batch before calling the rank silent and ending the run "
        "(default 45, or $MPITUNE_RANK_DEADLINE_FLOOR_S; see docs/reliability.md)",
    )
    p.add_argument(
        "--liveness-timeout",
        type=float,
        metavar="S",
        help="end the run when a rank has sent no heartbeat for S seconds, however long its batch "
        "(default 20, or $MPITUNE_LIVENESS_TIMEOUT_S; 0: no heartbeats; see docs/reliability.md)",
    )
    p.add_argument(
        "--allow-mixed-devices",
        action="store_true",
        help="run even when the ranks have different device models (their timings differ)",
    )
    _common(p)


def _replay_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mpitune replay",
        description=(
            "Replay a search on measured data (a Kernel Tuner JSON cache, plain or .gz, or an mpitune "
            ".h5 file) instead of running kernels; time is simulated from the recorded durations."
        ),
    )
    p.add_argument("cache", help="the measured data")
    p.add_argument(
        "--out",
        "--output",
        dest="out",
        metavar="OUT.h5",
        help="results file (default: CACHE's name with .replay.h5; --output is the older name)",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add to a results file that holds another strategy's replay (default: refuse, "
        "since a search that starts knowing another's results is no comparison)",
    )
    _search_flags(p, "simulated seconds")
    return p


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    p.add_argument("-v", "--verbose", action="store_true", help="log what each rank does")


def _setup_logging(args, rank: int) -> None:
    level = logging.DEBUG if args.debug else logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format=f"%(asctime)s rank {rank} %(levelname)s %(name)s: %(message)s"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "replay":
        from mpitune.spec.replay import replay_problem

        args = _replay_parser().parse_args(argv[1:])
        overrides = _overrides(args)
        return _tune(
            args,
            argv,
            lambda: _unmixed(replay_problem(_read_measured(args.cache), overrides, args.strategy), args.append),
        )
    if argv and argv[0] in commands.available():
        return _offline(argv[0], argv[1:])
    args = _tune_parser().parse_args(argv[1:] if argv and argv[0] == "tune" else argv)
    refusal = _not_python(args.spec)
    if refusal:
        return _refuse(refusal)
    return _tune(
        args,
        argv,
        lambda: _within(args.load_timeout, args.spec, lambda: _load_spec(args)),
        None if args.no_isolation else named_lang(args.spec),
        args.compile_workers,
    )


def _load_spec(args: argparse.Namespace) -> tuple[Problem, RunSettings]:
    from mpitune.spec.load import load_spec

    return load_spec(args.spec, _overrides(args), _read_measured)


class _LoadDeadline(BaseException):
    """Raised by SIGALRM in whatever the spec was running; not an Exception, so that the spec's
    own ``except Exception`` cannot swallow it."""


def _within(seconds: float, spec: str, load: Callable[[], tuple[Problem, RunSettings]]) -> tuple[Problem, RunSettings]:
    """``load()`` (on rank 0, in the main thread) under a deadline: a spec that loops forever
    ends the job with one line rather than hold every rank until the job's time limit."""

    def expired(signum, frame):
        raise _LoadDeadline

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        return load()
    except _LoadDeadline:
        raise SpecError(
            os.path.abspath(spec),
            "loading",
            f"did not finish within {seconds:g} s (an endless loop?); --load-timeout S allows longer",
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _overrides(args: argparse.Namespace) -> Overrides:
    from mpitune.spec.settings import Overrides

    return Overrides(
        strategy=args.strategy,
        max_fevals=args.max_fevals,
        time_limit_s=args.time_limit,
        seed=args.seed,
        cache_path=args.out,
        batch_size=args.batch_size,
        compile_workers=args.compile_workers,
        stop_file=args.stop_file or "",
        allow_mixed_devices=args.allow_mixed_devices,
        isolate=not args.no_isolation,
        rank_deadline_floor_s=args.rank_deadline_floor,
    )


def _not_python(path: str) -> str | None:
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


def _unmixed(loaded: tuple[Problem, RunSettings], append: bool) -> tuple[Problem, RunSettings]:
    """A replay into a file that holds another strategy's results would start knowing them; it
    is refused unless ``append`` asks for it. A real run's file is its resume cache: never refused."""
    problem, settings = loaded
    if problem.replay_source and not append and os.path.exists(settings.cache_path):
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


def _read_measured(path: str) -> MeasuredSpace:
    from mpitune.store import measured  # reads HDF5 files: imported only when a replay needs it

    return measured.load(path)


def _offline(verb: str, argv: list[str]) -> int:
    module = commands.load(verb)
    parser = _Parser(prog=f"python -m mpitune {verb}", description=module.HELP)
    module.add_arguments(parser)
    _common(parser)
    args = parser.parse_args(argv)
    _setup_logging(args, 0)
    try:
        code = module.run(args)
        sys.stdout.flush()  # a closed pipe shows here rather than at exit
        return code
    except BrokenPipeError:
        # The reader went away (``report ... | head``): nothing is left to say, and Python must
        # not try to flush into the closed pipe again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
    except UserError as exc:
        if args.debug:
            raise
        print(f"mpitune: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except (OSError, RuntimeError) as exc:
        failed_write = cannot_write(exc)
        if failed_write is None or args.debug:
            raise
        print(f"mpitune: error: {failed_write}", file=sys.stderr)
        return EXIT_CANNOT_WRITE


def _calm_oversubscribed_mpich() -> None:
    """With more ranks on a node than cores, MPICH's busy polling starves the ranks that
    work; its progress throttle makes idle ranks yield. Read at MPI_Init, so set before it."""
    local_ranks = os.environ.get("MPI_LOCALNRANKS")
    if local_ranks and local_ranks.isdigit() and int(local_ranks) > (os.cpu_count() or 1):
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "16")


def _tune(
    args: argparse.Namespace,
    argv: list[str],
    load: Callable[[], tuple[Problem, RunSettings]],
    worker_lang: str | None = None,
    compile_workers: int | None = None,
) -> int:
    """``load()`` gives the problem and settings; it runs on rank 0 only. ``worker_lang``: the
    backend to start this rank's worker process (and compile workers, ``compile_workers`` of
    them, None: the default) for before MPI (None: none early)."""
    _calm_oversubscribed_mpich()
    from mpitune.scheduling import early

    early.start(worker_lang)  # before MPI and the spec: the loop claims it
    try:
        return _run(args, argv, load, compile_workers)
    finally:
        early.end()  # unclaimed (the spec refused, MPI failed): it must not outlive the rank


def _start_mpi(
    load: Callable[[], tuple[Problem, RunSettings]], compile_workers: int | None, liveness_timeout_s: float | None
) -> tuple[tuple[ModuleType, Guard], Callable]:
    """The compile workers spawned, MPI started (the loop imported: it imports mpi4py, which
    initialises MPI) and this rank's heartbeat with it (the loop's ``Guard``), and what the
    loop calls to load the spec: on the rank the launcher names 0, the spec loaded meanwhile,
    under the heartbeat once MPI is up."""
    from mpitune.scheduling import early
    from mpitune.scheduling.preloaded import load_while

    def start() -> tuple[ModuleType, Guard]:
        early.start_compile_workers(compile_workers)  # spawned before MPI initialises, as the worker
        loop = importlib.import_module("mpitune.scheduling.loop")
        return loop, loop.guard(liveness_timeout_s)

    return load_while(start, load) if early.launcher_world_rank() == 0 else (start(), load)


def _run(
    args: argparse.Namespace,
    argv: list[str],
    load: Callable[[], tuple[Problem, RunSettings]],
    compile_workers: int | None = None,
) -> int:
    """The run on this rank, MPI's start included; an error that is not the user's ends the job."""
    from mpitune.scheduling import early

    (tuner, guard), load = _start_mpi(load, compile_workers, args.liveness_timeout)
    rank = tuner.MPI.COMM_WORLD.rank
    _setup_logging(args, rank)
    sys.unraisablehook = _unraisable
    command = shlex.join(["python", "-m", "mpitune", *argv])
    try:
        try:
            code = tuner.tune(load, command, debug=args.debug, guarded=guard)
        finally:
            early.end()  # before an abort below, which ends this process
    except KeyboardInterrupt:
        # Ctrl-C outside the rounds (start-up, the last write), where nothing is in flight to drain.
        print(
            f"mpitune: error: interrupted on rank {rank}; every finished batch is recorded "
            f"(exit code {tuner.EXIT_INTERRUPTED})",
            file=sys.stderr,
            flush=True,
        )
        tuner.MPI.COMM_WORLD.Abort(tuner.EXIT_INTERRUPTED)
        return tuner.EXIT_INTERRUPTED  # not reached
    except BaseException as exc:
        failed_write = cannot_write(exc)
        if failed_write:  # a full disk, a read-only folder: every batch recorded before is on disk
            print(
                f"mpitune: error: {failed_write}; every batch recorded before is kept: make room and run the "
                f"same command again to resume (exit code {EXIT_CANNOT_WRITE})",
                file=sys.stderr,
                flush=True,
            )
            tuner.MPI.COMM_WORLD.Abort(EXIT_CANNOT_WRITE)
            os._exit(EXIT_CANNOT_WRITE)  # should the abort return before the launcher ends this rank
        # A bug or a crash on this rank: the others would wait for it forever in the next
        # collective, so end the whole job now. Every finished batch is already on disk.
        logging.getLogger("mpitune").critical("rank %d failed; aborting the job", rank, exc_info=True)
        sys.stderr.flush()
        tuner.MPI.COMM_WORLD.Abort(1)
        return 1  # not reached
    _leave_now_if_threads_linger(code, tuner.MPI)
    return code


def _unraisable(unraisable) -> None:
    """h5py's objects, freed after a failed write (a full disk), repeat the failure from their
    destructors; that failure is reported once, in one line, so these go to the debug log."""
    if cannot_write(unraisable.exc_value):
        logging.getLogger("mpitune").debug("ignored in %r: %s", unraisable.object, unraisable.exc_value)
    else:
        sys.__unraisablehook__(unraisable)


def _leave_now_if_threads_linger(code: int, mpi) -> None:
    """Everything is recorded by now; a thread the spec started (not a daemon) would keep the
    process, and so the job, alive after it. Finish MPI and exit without waiting for it."""
    lingering = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if not lingering:
        return
    logging.getLogger("mpitune").warning("not waiting for thread(s) the spec started: %s", ", ".join(lingering))
    sys.stdout.flush()
    sys.stderr.flush()
    mpi.Finalize()
    os._exit(code)
