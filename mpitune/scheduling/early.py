"""What a rank starts before MPI is up: its measuring worker process (process/isolation.py).

A worker's own start (a fresh Python, its imports, on a GPU CuPy and the CUDA context) takes
seconds and needs no problem, while the problem reaches a rank only after MPI's start, rank
0's loading of the spec and a broadcast. So the command line spawns the worker first, for the
backend the spec names (read from its syntax, without running it) and the device of the
node-local rank the launcher announces in the environment; the loop claims it once the problem
is there. MPI's own node-local rank (``Split_type``) decides: a worker warmed up for another
device, or another backend, is ended and a fresh one started, as is one that the problem does
not need (no isolation). One that nothing claims (the spec was refused, MPI failed) is ended by
the command line before the rank leaves. No MPI here: this runs before it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from mpitune.process.prewarm import Spawned, spawn_worker

# The node-local rank as launchers announce it, before MPI is initialised: Open MPI, MPICH's
# Hydra, PMI launchers (Cray, MVAPICH), then Slurm's, which an ``mpirun`` inside a batch job
# inherits from the batch step and so is right only under ``srun``.
LOCAL_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
)
# Any of these says a launcher started this process, as one rank among others.
_LAUNCHED_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")

log = logging.getLogger(__name__)

_early: Spawned | None = None  # this process's worker, started early and not yet claimed


def launcher_local_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The node-local rank the launcher announces; 0 for a process no launcher started (MPI
    makes it a world of one); None for a launcher that does not say."""
    env = os.environ if environ is None else environ
    for name in LOCAL_RANK_VARIABLES:
        text = env.get(name, "").strip()
        if text.isdigit():
            return int(text)
    return None if any(name in env for name in _LAUNCHED_VARIABLES) else 0


def start(lang_text: str | None) -> None:
    """Spawn this rank's worker now for the backend a spec's ``lang`` names (None: not known
    without running the spec, or no isolation asked for: none is started). Nothing heavy is
    imported here, so that the worker starts as soon as the rank's Python does."""
    global _early
    if _early is None and lang_text:
        _early = spawn_worker(lang_text, launcher_local_rank())


def claim(lang: str, isolate: bool, local_rank: int) -> Spawned | None:
    """The early worker, if it warmed up what a problem of ``lang`` on MPI's ``local_rank``
    needs; otherwise it is ended (None: the caller starts a worker itself if it needs one)."""
    global _early
    spawned, _early = _early, None
    if spawned is None:
        return None
    from mpitune import backends  # imported by the loop by now; not before the spawn

    ago_s = time.perf_counter() - spawned.spawned_at
    caps = backends.resolve(spawned.lang)
    if isolate and caps is not None and caps.lang == lang and spawned.local_rank in (None, local_rank):
        log.info("worker process %d, started %.2f s ago before MPI, takes the problem", spawned.pid, ago_s)
        return spawned
    why = (
        "the problem needs no worker process"
        if not isolate
        else f"it warmed up backend {spawned.lang} on local rank {spawned.local_rank} and the problem needs "
        f"{lang} on local rank {local_rank} (MPI's): starting a fresh one"
    )
    log.info("ending worker process %d, started %.2f s ago before MPI: %s", spawned.pid, ago_s, why)
    spawned.end()
    return None


def end() -> None:
    """End the early worker if nothing claimed it (the spec refused, MPI failed); at once."""
    global _early
    spawned, _early = _early, None
    if spawned is not None:
        log.info("ending worker process %d, started before MPI: no problem came for it", spawned.pid)
        spawned.end()
