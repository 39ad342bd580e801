"""``mpitune.tune_kernel``: Kernel Tuner's call, for scripts and notebooks.

The arguments are checked as a spec's names by the spec loader, before anything starts, and a
mistake raises ``mpitune.errors.SpecError`` naming the argument. With ``ranks=1`` the calling
process is the one rank and tunes itself; with more, an MPI job of that many ranks tunes
(job.py). Either way the results go to one HDF5 file (``cache``, or a temporary one), read
back as Kernel Tuner's ``(results, env)`` (results.py).
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mpitune.api import job
from mpitune.api.launch import ERROR_PREFIX
from mpitune.api.names import refuse_callables, spec_names
from mpitune.api.results import kt_env, kt_results
from mpitune.errors import SpecError, UserError
from mpitune.exits import ExitCode
from mpitune.model.problem import Problem, RunSettings
from mpitune.spec.load import load_names
from mpitune.spec.replay import MeasuredSpace
from mpitune.spec.settings import Overrides
from mpitune.spec.settings_table import LIVENESS_TIMEOUT

ORIGIN = "tune_kernel"  # what error messages name in place of a spec file
_KT_CACHE_SUFFIXES = (".json", ".json.gz")


def tune_kernel(
    kernel_name: str,
    kernel_source: str | os.PathLike[str],
    problem_size: int | Sequence[int],
    arguments: Sequence[Any],
    tune_params: dict[str, Sequence[Any]],
    *,
    cache: str | os.PathLike[str] | None = None,
    ranks: int = 1,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Tune a kernel as Kernel Tuner's ``tune_kernel`` does, with its arguments.

    A Kernel Tuner script ports by changing its import. Every other name a spec file may set is
    a keyword here (docs/spec.md), and a failed configuration is a status, not an exception.

    Args:
        kernel_name: the kernel's name in its source.
        kernel_source: the source as text, or a path relative to the current directory.
        problem_size: the problem's size, which sets the grid with the block size.
        arguments: the kernel's arguments: numpy arrays and scalars.
        tune_params: each tunable parameter's values.
        cache: an HDF5 file that a later call with the same problem resumes from. Without it, a
            temporary file that is removed.
        ranks: above 1, an MPI job of that many ranks starts, one per device, and its progress
            streams here. Its problem cannot hold functions: use expression strings.
        **kwargs: Kernel Tuner's other keywords (``lang``, ``restrictions``, ``answer``,
            ``strategy``, ``strategy_options``, ...) and mpitune's (``prior``: files measured
            elsewhere that the search starts from, relative to the current directory).

    Returns:
        ``(results, env)`` in Kernel Tuner's shapes (docs/python-api.md): one dict per measured
        configuration, and the environment of the run.

    Raises:
        SpecError: the problem or a keyword cannot be tuned; the message names the field.
    """
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise SpecError(ORIGIN, "ranks", f"must be a whole number of ranks, at least 1, got {ranks!r}")
    keywords = dict(kwargs)
    if keywords.get("devices") == "each":  # its results would be one file per device model
        raise SpecError(
            ORIGIN,
            "devices",
            "tune_kernel returns one device model's results; tune several in one job with "
            "python -m mpitune SPEC --devices each, and compare them with report",
        )
    simulation = bool(keywords.get("simulation_mode"))
    if cache is not None:
        if not simulation and str(cache).endswith(_KT_CACHE_SUFFIXES):
            raise SpecError(
                ORIGIN,
                "cache",
                f"{os.fspath(cache)!r} is a Kernel Tuner JSON cache; mpitune writes "
                "an HDF5 file (name one ending in .h5; python -m mpitune import "
                "converts a JSON cache)",
            )
        # A replay's data is found from the job's spec, elsewhere: the path must not be relative.
        keywords["cache"] = os.path.abspath(cache)
    if "prior" in keywords:
        keywords["prior"] = _absolute(keywords["prior"])
    names = spec_names(kernel_name, kernel_source, problem_size, arguments, tune_params, keywords)
    with tempfile.TemporaryDirectory(prefix="mpitune-") as scratch:
        kept = cache is not None and not simulation
        output = keywords["cache"] if kept else os.path.join(scratch, "tune_kernel.h5")
        problem, settings = load_names(
            names, ORIGIN, os.getcwd(), Overrides(cache_path=output), read_measured=_read_measured, strict=True
        )
        if ranks > 1:
            refuse_callables(names, ORIGIN)
            job.run_job(ranks, names, problem, settings, ORIGIN)
        else:
            _tune_here(problem, settings)
        from mpitune.store import reader  # HDF5: only once there is a file to read

        data = reader.read(settings.cache_path)
    results = kt_results(data, problem)
    return results, kt_env(data, problem, results, settings.cache_path if kept else "")


def _absolute(prior: Any) -> Any:
    """``prior``'s paths (relative to the current directory) made absolute, so that a job's
    generated spec, elsewhere, finds the same files; anything else is left for the spec's check."""
    if isinstance(prior, (str, os.PathLike)):
        prior = [prior]
    if isinstance(prior, (list, tuple)):
        return [os.path.abspath(p) if isinstance(p, (str, os.PathLike)) and os.fspath(p) else p for p in prior]
    return prior


def _read_measured(path: str) -> MeasuredSpace:
    from mpitune.store import measured

    return measured.load_shared(path)  # the replay backend in this process reads the same: parsed once


def _tune_here(problem: Problem, settings: RunSettings) -> None:
    """This process as the one rank of the run. Errors the run reports (an empty space, a cache
    of another problem) are raised instead of printed."""
    from mpitune.scheduling import run  # imports mpi4py, which initialises MPI: only when tuning

    with _main_hidden_from_workers(), _errors_raised() as errors:
        command = f"mpitune.tune_kernel({problem.kernel.kernel_name!r})"
        exit_code = run.tune(lambda: (problem, settings), command, liveness_timeout_s=LIVENESS_TIMEOUT.merged(None))
    if errors:
        raise UserError("; ".join(errors))
    if exit_code not in (ExitCode.OK, ExitCode.RESUMABLE):
        raise RuntimeError(f"tuning ended with exit code {exit_code}")


@contextmanager
def _main_hidden_from_workers() -> Iterator[None]:
    """The run measures in worker processes started with "spawn", which first run the parent's
    ``__main__`` script again (to find functions pickled from it). A Kernel Tuner script calls
    ``tune_kernel`` at its top level, unguarded by ``if __name__ == "__main__"``: each worker
    would tune all over again. The workers need nothing of ``__main__`` (the problem's functions
    stay in this process), so multiprocessing is not told where it is while the run lasts."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, Any] = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


class _ErrorLines(io.TextIOBase):
    """Standard error, less the lines by which the run says why it stopped: those are kept."""

    def __init__(self, stream: Any):
        self.stream, self._line = stream, ""
        self.kept: list[str] = []

    def write(self, text: str) -> int:
        self._line += text
        *lines, self._line = self._line.split("\n")
        for line in lines:
            if line.startswith(ERROR_PREFIX):
                self.kept.append(line[len(ERROR_PREFIX) :])
            else:
                self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def end(self) -> None:
        """Pass on what is left of a line not ended."""
        if self._line:
            self.stream.write(self._line)
            self._line = ""


@contextmanager
def _errors_raised() -> Iterator[list[str]]:
    stderr = sys.stderr
    lines = _ErrorLines(stderr)
    sys.stderr = lines
    try:
        yield lines.kept
    finally:
        sys.stderr = stderr
        lines.end()
