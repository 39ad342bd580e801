"""Plots of a real run's file and of an imported Kernel Tuner cache: every PNG is written,
is not blank, and every axis says what it shows."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import mpi_env, mpitune, report_json, write_scale_spec

matplotlib = pytest.importorskip("matplotlib")
pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plots")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8, 16], "MODE": [0, 1, 2]}')
    proc = mpitune(3, [str(spec), "--cache", str(tmp / "out.h5"), "--max-fevals", "9"], tmp)
    assert proc.returncode == 0, proc.stderr
    proc = mpitune(2, [str(spec), "--cache", str(tmp / "out.h5")], tmp)  # resumes: a second run
    assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5"


# GFLOP/s of the scale spec (n elements, one multiply each): an objective where higher is better.
GFLOPS = """
metrics = {"GFLOP/s": lambda p: n / 1e9 / (p["time"] / 1e3)}
objective = "GFLOP/s"
objective_higher_is_better = True
"""


@pytest.fixture(scope="module")
def gflops_cache(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plots_gflops")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0, 2]}', extra=GFLOPS)
    proc = mpitune(2, [str(spec), "--cache", str(tmp / "out.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5"


def check_png(path) -> None:
    import matplotlib.image

    image = matplotlib.image.imread(str(path))
    assert image.shape[0] > 300 and image.shape[1] > 600
    assert image[..., :3].std() > 0.05  # drawn on, not blank


def check_labelled(fig) -> None:
    assert (fig._suptitle is not None and fig._suptitle.get_text()) or fig.axes[0].get_title()
    for ax in fig.axes:
        if ax.axison:
            assert ax.get_xlabel(), ax
    # A y label, or tick labels that name what they are ("rank 0").
    assert any(ax.get_ylabel() or "rank" in ax.get_yticklabels()[0].get_text() for ax in fig.axes)
    assert fig.legends or any(ax.get_legend() for ax in fig.axes)


def test_plot_command_writes_every_png(cache, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "plot", str(cache), "--out", str(tmp_path / "p")],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    names = {"convergence.png", "timeline.png", "distribution.png", "parameters.png"}
    assert {p.name for p in (tmp_path / "p").iterdir()} == names
    assert len(proc.stdout.split()) == 4
    for name in names:
        check_png(tmp_path / "p" / name)


def test_every_figure_has_titles_labels_and_legends(cache):
    import matplotlib.pyplot as plt

    from mpitune.analysis import load
    from mpitune.offline import plots

    tables = load(str(cache))
    for name in plots.PLOTS:
        fig = plots.FIGURES[name](tables, plt)
        check_labelled(fig)
        plt.close(fig)


def test_gantt_chart_shows_both_runs_and_every_rank_with_waiting(cache):
    import matplotlib.pyplot as plt

    from mpitune.analysis import load
    from mpitune.offline.plots import timeline

    fig = timeline.figure(load(str(cache)), plt)
    first, second = fig.axes
    assert [t.get_text() for t in first.get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert len(second.get_yticklabels()) == 2
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "waiting for other ranks" in legend and "compile" in legend
    plt.close(fig)


def test_plots_of_an_imported_kernel_tuner_cache(tmp_path, pnpoly):
    from mpitune.offline.kt_import import import_kt
    from mpitune.offline.plots import plot

    import_kt(str(pnpoly), str(tmp_path / "pnpoly.h5"))
    for path in plot(str(tmp_path / "pnpoly.h5"), str(tmp_path / "p"), ("convergence", "parameters")):
        check_png(path)


def test_without_matplotlib_a_clear_error(cache, tmp_path, monkeypatch):
    from mpitune.errors import UserError
    from mpitune.offline import plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match="pip install"):
        plots.plot(str(cache), str(tmp_path))


def test_plots_follow_a_higher_is_better_objective_as_the_report_does(gflops_cache, tmp_path):
    import matplotlib.pyplot as plt

    from mpitune.analysis import load
    from mpitune.offline import plots
    from mpitune.offline.plots import convergence, distribution, parameters

    with h5py.File(gflops_cache, "r") as f:
        res = f["results"][...]
        gflops = f["metrics"][:, json.loads(f["metrics"].attrs["names"]).index("GFLOP/s")]
    order = np.lexsort((res["config_id"], res["finished_s"], res["run"]))  # in the order they finished
    counted = np.where(res["status"][order] == b"ok", gflops[order], -np.inf)
    running_max = np.maximum.accumulate(counted)
    best = report_json(gflops_cache)["best"]
    assert best["objective"] == pytest.approx(running_max[-1])

    tables = load(str(gflops_cache))
    fig = convergence.figure(tables, plt)
    by_evals = fig.axes[1]
    [curve] = [line for line in by_evals.lines if line.get_drawstyle() == "steps-post"]
    np.testing.assert_allclose(curve.get_ydata(), running_max[np.isfinite(running_max)])
    assert (np.diff(curve.get_ydata()) >= 0).all()
    [star] = [line for line in by_evals.lines if line.get_marker() == "*"]
    assert star.get_ydata()[0] == pytest.approx(best["objective"])
    best_row = order[int(star.get_xdata()[0]) - 1]
    assert int(res["config_id"][best_row]) == best["config_id"]
    assert fig.axes[0].get_ylabel() == "GFLOP/s, higher is better"
    plt.close(fig)

    fig = distribution.figure(tables, plt)
    assert fig.axes[0].get_xlabel() == "GFLOP/s"
    [best_line] = [line for line in fig.axes[0].lines if line.get_label().startswith("best")]
    assert best_line.get_xdata()[0] == pytest.approx(best["objective"])
    plt.close(fig)

    fig = parameters.figure(tables, plt)
    [per_value] = [line for line in fig.axes[0].lines if line.get_label() == "best per value"]
    ok = res["status"] == b"ok"
    expected = [gflops[ok & (res["STEP"] == step)].max() for step in sorted(set(res["STEP"][ok]))]
    np.testing.assert_allclose(per_value.get_ydata(), expected)
    plt.close(fig)

    for path in plots.plot(str(gflops_cache), str(tmp_path / "p")):
        check_png(path)
