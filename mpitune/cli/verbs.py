"""Every verb of ``python -m mpitune VERB``, in one table, split by purpose.

Verbs that run or plan a tuning job live in cli/. They load a spec, start MPI, call Slurm or
simulate the scheduler. Verbs that read a results file are the modules of ``mpitune.commands``.
They need neither MPI nor a GPU.
"""

from __future__ import annotations

from types import ModuleType

from mpitune import commands
from mpitune.cli import job

TUNE_HELP = "tune the kernel a spec file describes on every MPI rank (the default: python -m mpitune SPEC)"
REPLAY_HELP = "replay a search on measured data (Kernel Tuner JSON cache or mpitune .h5) with simulated time"
PLAN_HELP = (
    "predict wall time, efficiency, jobs and the sbatch line on each number of ranks, "
    "from a measured run or from a spec (a pilot on this machine)"
)
# The verbs that tune, each with its one line. ``tune``, ``replay`` and ``plan`` have parsers of
# their own (parsers.py, planning.py). ``job`` is a module with ``HELP``, ``add_arguments`` and
# ``run``, as every file verb is.
TUNING_VERBS = {"tune": TUNE_HELP, "replay": REPLAY_HELP, "plan": PLAN_HELP, "job": job.HELP}


def verb_module(verb: str) -> ModuleType | None:
    """The module that runs ``verb`` through ``add_arguments`` and ``run``. None for the verbs
    with parsers of their own, and for a word that is no verb (a spec's path)."""
    if verb == "job":
        return job
    if verb in commands.verbs():
        return commands.module_of(verb)
    return None


def every_verb() -> dict[str, str]:
    """Every verb and its one line: those that tune first, then those that read a file."""
    lines = dict(TUNING_VERBS)
    lines.update({verb: str(commands.module_of(verb).HELP) for verb in sorted(commands.verbs())})
    return lines
