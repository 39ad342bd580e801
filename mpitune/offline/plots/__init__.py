"""Pictures of a cache file (matplotlib, Agg backend: no display needed).

    python -m mpitune plot spec.h5 --out plots/

It writes four pictures:

- ``convergence.png``: the best objective value so far, against wall time and against evaluations.
- ``timeline.png``: a Gantt chart of every rank's phases.
- ``distribution.png``: the objective over the measured configurations.
- ``parameters.png``: the objective against each tunable parameter.

A file of several objectives also gets ``pareto.png`` (offline/front.py). It draws objective 1
against objective 2, with the Pareto front highlighted. Each is drawn by the ``figure`` function
of its module here. The objective is the one the file records (the first of several), with its
direction. It is ranked as ``report`` ranks it (mpitune/offline/ranking.py). So plots and report
name the same best.
"""

from __future__ import annotations

import os
from typing import Any

from mpitune.errors import UserError
from mpitune.offline import front
from mpitune.offline.analysis import frames
from mpitune.offline.plots import convergence, distribution, parameters, timeline
from mpitune.store.files import refuse_inputs, written_whole
from mpitune.store.reader import read

FIGURES = {
    "convergence": convergence.figure,
    "timeline": timeline.figure,
    "distribution": distribution.figure,
    "parameters": parameters.figure,
}
PLOTS = tuple(FIGURES)  # of every file, from its tables
PARETO = "pareto"  # of a file of several objectives (offline/front.py)
CHOICES = (*PLOTS, PARETO)


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "plots need matplotlib: pip install matplotlib (in a checkout: pip install -e '.[analysis]')"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(path: str, out_dir: str, which: tuple[str, ...] | None = None, dpi: int = 100) -> list[str]:
    """Write the chosen plots of a cache file into out_dir; returns the paths written.

    By default every plot that applies is written: ``pareto`` only applies to a file of several
    objectives. Refused at once, before anything is read, when the folder or a picture it may hold
    is the file itself."""
    for target in (out_dir, *(picture(out_dir, name) for name in which or CHOICES)):
        refuse_inputs(target, path)
    plt = pyplot()
    data = read(path)
    tables = frames(data)
    if not len(tables.results):
        raise UserError(f"{path} holds no results yet")
    if which is None:
        which = (*PLOTS, PARETO) if data.objective.several else PLOTS
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name in which:
        fig = front.figure(data, plt) if name == PARETO else FIGURES[name](tables, plt)
        try:
            with written_whole(picture(out_dir, name)) as fh:
                fig.savefig(fh, format="png", dpi=dpi)
        finally:
            plt.close(fig)
        written.append(picture(out_dir, name))
    return written


def picture(out_dir: str, name: str) -> str:
    return os.path.join(out_dir, f"{name}.png")
