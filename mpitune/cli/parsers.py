"""The command line's flags: the tuning run's, ``replay``'s and those every verb shares.
Under mpiexec every rank parses the same flags, so a bad one is refused on each rank alike."""

from __future__ import annotations

import argparse
import sys

from mpitune import __version__
from mpitune.cli.verbs import every_verb
from mpitune.errors import checked_number, number_flag
from mpitune.exits import ExitCode

LOAD_TIMEOUT_S = 60.0  # how long a spec may take to load (run its module, pass its checks)


def refuse(message: str) -> int:
    """A user error before MPI starts: every rank exits 2, and the first alone says why.
    Under a launcher that does not say which rank is first, each rank says it."""
    from mpitune.scheduling.before_mpi import launcher_world_rank

    if launcher_world_rank() in (0, None):
        print(f"mpitune: error: {message}", file=sys.stderr)
    return ExitCode.USER_ERROR


class Parser(argparse.ArgumentParser):
    """A parser whose bad flag ends each rank with exit code 2. Under mpiexec every rank parses
    the same flags. The first rank alone says why, in one line, as for every other user error."""

    def error(self, message: str):
        self.exit(refuse(f"{message} (see {self.prog} --help)"))


def _subcommands() -> str:
    """Every subcommand with its one line, for the top-level ``--help``."""
    lines = every_verb()
    width = max(map(len, lines))
    return (
        "commands:\n"
        + "\n".join(f"  {verb:<{width}}  {text}" for verb, text in lines.items())
        + ("\n\n'python -m mpitune COMMAND --help' shows a command's flags.")
    )


def _strategies() -> str:
    """Every strategy and its options, as the strategies declare them, for ``--help``. Imported
    here, not above: it loads every strategy (and numpy), which the offline verbs never need."""
    from mpitune.spec.settings import strategies_help

    return strategies_help()


def tune_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m mpitune",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tune the kernel described by SPEC on every MPI rank: "
        "mpiexec -n RANKS python -m mpitune [tune] SPEC [flags].",
        epilog=f"{_strategies()}\n\n{_subcommands()}",
    )
    p.add_argument("--version", action="version", version=f"mpitune {__version__}")
    p.add_argument("spec", help="the spec file (Python, Kernel Tuner's tune_kernel names)")
    _out_flag(p, "--cache", "PATH", "HDF5 results file", "SPEC's name with .h5, here")
    p.add_argument(
        "--load-timeout",
        type=number_flag(),
        default=LOAD_TIMEOUT_S,
        metavar="S",
        help=f"give up when the spec takes longer than S seconds to load (default {LOAD_TIMEOUT_S:g})",
    )
    _search_flags(p, "seconds")
    return p


def _search_flags(p: argparse.ArgumentParser, seconds: str) -> None:
    """The flags of the run settings, from their table (spec/settings_table.py). The table is
    imported here, not above, as the strategies are: the offline verbs never need it."""
    from mpitune.spec.settings_table import SETTINGS

    for setting in SETTINGS:
        if setting.flag is not None:
            setting.add_flag(p, seconds)
    common(p)


def replay_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m mpitune replay",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_strategies(),
        description=(
            "Replay a search on measured data (a Kernel Tuner JSON cache, plain or .gz, or an mpitune\n"
            ".h5 file) instead of running kernels; time is simulated from the recorded durations.\n"
            "Several files of one kernel and space, each measured on another device model, simulate a\n"
            "job of those models: rank r replays CACHE number r mod k of the k given (with --devices each)."
        ),
    )
    p.add_argument("caches", nargs="+", metavar="CACHE", help="the measured data, one file or several")
    _out_flag(p, "--output", "OUT.h5", "results file", "the first CACHE's name with .replay.h5")
    p.add_argument(
        "--append",
        action="store_true",
        help="add to a results file that holds another strategy's replay (default: refuse, "
        "since a search that starts knowing another's results is no comparison)",
    )
    _bias_flags(p)
    kernel_cache_flag(p)
    _search_flags(p, "simulated seconds")
    return p


def kernel_cache_flag(p: argparse.ArgumentParser) -> None:
    """What a replay charges for compiling a candidate again, where the data does not record it
    (a Kernel Tuner cache). spec/replay.py's ``kernel_cache_assumed`` says how."""
    from mpitune.spec.replay import KERNEL_CACHE_REACHES  # with the replay, which needs it anyway

    p.add_argument(
        "--kernel-cache",
        choices=KERNEL_CACHE_REACHES,
        help="for data that does not record it (a Kernel Tuner cache): whether a candidate timed again "
        "(confirmation, calibration) is loaded from the kernel cache (shared: a folder every node sees) or "
        "compiled again (node, off); default: as this machine's kernel cache folder is (docs/performance.md)",
    )


def _bias_flags(p: argparse.ArgumentParser) -> None:
    """A replay's simulated devices can disagree, as real ones do. So what copes with a biased
    device (the confirmation) can be tried on measured data (docs/analysis.md)."""
    bias = p.add_mutually_exclusive_group()
    bias.add_argument(
        "--device-bias",
        type=_factors,
        default=(),
        metavar="F0,F1,...",
        help="multiply rank r's recorded times by F[r %% count] (default: 1, no bias)",
    )
    bias.add_argument(
        "--device-bias-sd",
        type=number_flag(zero_ok=True),
        metavar="S",
        help="multiply each rank's recorded times by a factor drawn from N(1, S) with --seed",
    )


def _factors(text: str) -> tuple[float, ...]:
    """Comma-separated factors, each > 0: a time scaled by 0 means nothing."""
    try:
        return tuple(checked_number(part.strip()) for part in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"each factor: {exc}") from None


def _out_flag(p: argparse.ArgumentParser, older: str, metavar: str, what: str, default: str) -> None:
    """``--out``, the results file, also under the flag's ``older`` name."""
    text = f"{what} (default: {default}; {older} is the older name)"
    p.add_argument("--out", older, dest="out", metavar=metavar, help=text)


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    p.add_argument("-v", "--verbose", action="store_true", help="log what each rank does")
