"""Multi-objective end to end on the C backend: ``mpiexec -n 2 python -m mpitune SPEC`` with two
objectives (the kernel time and a metric of the configuration) searched by nsga2 writes a file
whose recorded front, ``report --json``'s front and ``report``'s lines are the front found by brute
force over the file's results; ``plot`` draws it."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import mpi_env, mpitune, report_json, write_scale_spec

# Trips of the outer loop, a metric computed from the configuration: fewer is better, while this
# small kernel runs fastest with the smallest STEP (the most trips).
TWO = """
metrics = {"trips": "n / STEP"}
objective = ["time", "trips"]
objective_higher_is_better = [False, False]
strategy = "nsga2"
strategy_options = {"max_fevals": 12, "population": 4, "seed": 1}
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8, 16, 32, 64, 128], "MODE": [0, 1]}', extra=TWO)
    proc = mpitune(2, [str(spec), "--cache", str(tmp / "out.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5"


def brute_force_front(path) -> list[int]:
    """The config ids no other passing configuration beats in both objectives, from plain h5py."""
    with h5py.File(path) as f:
        rows = f["results"][...]
        names = json.loads(f["metrics"].attrs["names"])
        trips = f["metrics"][...][:, names.index("trips")]
    ok = rows["status"] == b"ok"
    points = np.c_[rows["time_ms"], trips][ok]
    ids = rows["config_id"][ok]
    return sorted(
        int(ids[i])
        for i in range(len(points))
        if not any((q <= points[i]).all() and (q < points[i]).any() for q in points)
    )


def test_the_front_is_recorded_reported_and_is_the_brute_force_one(tuned):
    expected = brute_force_front(tuned)
    assert expected  # MODE 1 only fails to compile: passing configurations were measured
    with h5py.File(tuned) as f:
        assert sorted(f["front"]["config_id"][...].tolist()) == expected
        recorded = json.loads(f.attrs["objective"])
        assert recorded["objectives"] == ["time", "trips"] and recorded["objectives_higher_is_better"] == [False] * 2
        assert f["runs"]["strategy"][0] == b"nsga2" and f["runs"]["measured"][0] == 12
    pareto = report_json(tuned)["pareto"]
    assert sorted(m["config_id"] for m in pareto["front"]) == expected == pareto["recorded_config_ids"]
    assert [o["name"] for o in pareto["objectives"]] == ["time", "trips"]
    assert list(pareto) == ["objectives", "with_values", "recorded_config_ids", "front"]  # as earlier versions wrote
    assert list(pareto["objectives"][0]) == ["name", "higher_is_better"]
    assert list(pareto["front"][0]) == ["config_id", "config", "objectives", "time_ms"]
    times = [m["objectives"]["time"] for m in pareto["front"]]
    assert times == sorted(times)  # best first by the first objective
    assert all(m["objectives"]["trips"] == 4096 / m["config"]["STEP"] for m in pareto["front"])
    text = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(tuned)], env=mpi_env(), capture_output=True, text=True
    ).stdout
    assert f"Pareto front of time in ms (lower is better) and trips (lower is better): {len(expected)} of" in text


def test_plot_draws_the_front(tuned, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "plot", str(tuned), "--out", str(tmp_path)],
        env=mpi_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    drawn = tmp_path / "pareto.png"
    assert str(drawn) in proc.stdout.split() and drawn.stat().st_size > 10_000
    assert len(proc.stdout.split()) == 5  # and the four plots of every file


def test_the_front_figure_marks_every_front_member_and_names_both_objectives(tuned):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from test_plots import check_labelled

    from mpitune.offline.front import figure
    from mpitune.store.reader import read

    fig = figure(read(str(tuned)), plt)
    check_labelled(fig)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time in ms (lower is better)" and ax.get_ylabel() == "trips (lower is better)"
    front = [c for c in ax.collections if c.get_label().startswith("Pareto front")]
    assert len(front) == 1 and len(front[0].get_offsets()) == len(brute_force_front(tuned))
    plt.close(fig)


def test_the_html_report_fills_its_pareto_place(tuned):
    """In a real headless Chromium: the Pareto chart is there, after the convergence, and its
    highlighted points are the front of ``report``."""
    pytest.importorskip("plotly")
    from headless import browser_or_skip, open_page

    pw, chromium = browser_or_skip()
    try:
        out = tuned.with_suffix(".html")
        proc = subprocess.run(
            [sys.executable, "-m", "mpitune", "report", str(tuned), "--html", str(out)],
            env=mpi_env(),
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        page, seen = open_page(chromium, out.as_uri())
        assert seen.errors == []
        ids = page.eval_on_selector_all(".js-plotly-plot", "els => els.map(e => e.id)")
        assert ids[:2] == ["convergence", "pareto"]
        drawn = page.evaluate("""() => {
            const t = document.getElementById('pareto')._fullData.find(t => t.meta === 'front');
            return [Array.from(t.x), Array.from(t.y)];
        }""")
        front = report_json(tuned)["pareto"]["front"]
        expected = sorted((m["objectives"]["time"], m["objectives"]["trips"]) for m in front)
        assert np.allclose(sorted(zip(*drawn)), expected)
        assert "time (ms), lower is better" in page.inner_text("#pareto")
        page.close()
    finally:
        chromium.close()
        pw.stop()


def test_the_reader_report_page_and_plots_hold_the_goal_the_file_records(tuned):
    """One record of the objective: the goal the run wrote is the one every reader holds, and the
    page's values are the reader's, by the one rule of store/rows.py."""
    from mpitune.analysis import load
    from mpitune.model.objective import Goal
    from mpitune.offline.html.view import view
    from mpitune.offline.plots.axes import with_objective
    from mpitune.offline.summary import summarize
    from mpitune.store.reader import read

    with h5py.File(tuned) as f:
        written = Goal.from_record(json.loads(f.attrs["objective"]))
    assert written.names == ("time", "trips") and written.metrics == {"trips": "n / STEP"}
    data, tables = read(str(tuned)), load(str(tuned))
    page = view(tables)
    assert data.objective == summarize(data).objective.goal == page.objective.goal == written
    assert with_objective(tables)[1].goal == written
    values = data.objective_values()
    passed = np.isfinite(values).all(axis=1)
    assert passed.any() and not passed.all()  # MODE 1 fails to compile: those rows hold NaN
    on_page = page.objective.every
    assert sorted(map(tuple, on_page[np.isfinite(on_page).all(axis=1)])) == sorted(map(tuple, values[passed]))
