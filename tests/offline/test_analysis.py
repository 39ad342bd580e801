"""The pandas loader, on the file of a real run (real mpiexec, real gcc, real HDF5)."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, mpitune, write_scale_spec

from mpitune.errors import UserError
from mpitune.model.schema import RESULT_COLUMNS
from mpitune.model.timeline import BACKGROUND_PHASES
from mpitune.offline.analysis import run_table

pd = pytest.importorskip("pandas")


@pytest.fixture
def cache(run_with_failures):
    return run_with_failures


def test_results_one_row_per_configuration_with_parameters_and_statistics(cache):
    from mpitune.analysis import load

    results, _ = load(str(cache))
    assert len(results) == 12 and results["config_id"].is_unique
    assert {
        "STEP",
        "MODE",
        "status",
        "time_ms",
        "iterations",
        "min_ms",
        "mean_ms",
        "max_ms",
        "std_ms",
        "times_ms",
        "compile_s",
        "verify_s",
        "benchmark_s",
        "rank",
        "host",
        "device",
        "batch",
        "started",
        "finished",
    } <= set(results.columns)
    assert results.groupby("MODE")["status"].first().to_dict() == {0: "ok", 1: "compile_error", 2: "verify_failed"}
    ok = results[results["status"] == "ok"]
    assert (ok["iterations"] == 3).all()
    assert (ok["min_ms"] <= ok["time_ms"]).all() and (ok["time_ms"] <= ok["max_ms"]).all()
    assert all(len(t) == 3 for t in ok["times_ms"])
    assert results.loc[results["status"] == "compile_error", "time_ms"].isna().all()
    assert set(results["rank"]) == {0, 1}
    assert (results["finished"] >= results["started"]).all()
    assert str(results["started"].dt.tz) == "UTC"
    assert results.attrs["param_names"] == ["STEP", "MODE"]
    # Every result field of the schema, in the schema's order around the parameters and statistics.
    fields = ["config_id", "STEP", "MODE", *(c.name for c in RESULT_COLUMNS)]
    assert [c for c in results.columns if c in fields] == fields
    assert results.attrs["runs"][0]["strategy"] == "brute_force"


def test_timeline_covers_every_rank_without_overlap(cache):
    from mpitune.analysis import load

    _, timeline = load(str(cache))
    assert {"compile", "benchmark", "wait", "startup", "strategy"} <= set(timeline["phase"])
    assert np.allclose(timeline["duration_s"], timeline["end_s"] - timeline["start_s"])
    # Background phases (the worker's own start, compiling ahead) run beside a rank's own.
    own = timeline[~timeline["phase"].isin(BACKGROUND_PHASES)]
    for _, rows in own.groupby("rank"):
        rows = rows.sort_values("start_s")
        assert (rows["start_s"].to_numpy()[1:] - rows["end_s"].to_numpy()[:-1]).min() > -1e-6
        assert rows["duration_s"].sum() == pytest.approx(rows["end_s"].max(), rel=0.02, abs=0.01)
    assert (timeline["host"] != "").all() and (timeline["device"] != "").all()


def test_without_pandas_a_clear_error(cache, monkeypatch):
    from mpitune.offline import analysis

    monkeypatch.setitem(sys.modules, "pandas", None)  # makes "import pandas" fail
    with pytest.raises(UserError, match="pip install"):
        analysis.load(str(cache))


# The recipes the documentation shows, run as written: a block of Python that reads a results file.
DOCS = ("docs/analysis.md", "docs/from-kernel-tuner.md")
READS_A_FILE = ("load(", "h5py.File(")


def code_blocks(markdown: str) -> list[str]:
    """Fenced ```python blocks and indented blocks (four spaces after a blank line) that start with
    an import: what a reader copies into a notebook."""
    fenced = re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)
    indented = [
        textwrap.dedent(block)
        for block in re.findall(r"(?:^|\n\n)((?: {4}.*\n?)+)", markdown)
        if block.lstrip().startswith(("from ", "import "))
    ]
    return fenced + indented


def recipes() -> list[tuple[str, str]]:
    from mpitune.offline import analysis

    found = [(doc, block) for doc in DOCS for block in code_blocks((REPO / doc).read_text())]
    found.append(("mpitune.offline.analysis", textwrap.dedent(analysis.__doc__.split("\n\n")[1])))
    return [(where, block) for where, block in found if any(r in block for r in READS_A_FILE)]


RECIPES = recipes()


def test_the_documentation_shows_its_recipes():
    # The h5py recipe and the loader's in analysis.md, the loader's in the porting guide and its docstring.
    assert {where for where, _ in RECIPES} == {*DOCS, "mpitune.offline.analysis"} and len(RECIPES) >= 4


@pytest.fixture(scope="module")
def documented_files(tmp_path_factory) -> Path:
    """A real run with a GFLOP/s metric, under every file name the recipes open."""
    tmp = tmp_path_factory.mktemp("recipes")
    spec = write_scale_spec(tmp, extra='metrics = {"GFLOP/s": lambda p: n / 1e9 / (p["time"] / 1e3)}\n')
    proc = mpitune(2, [str(spec), "--out", str(tmp / "spec.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    shutil.copy(tmp / "spec.h5", tmp / "convolution.h5")
    return tmp


@pytest.mark.parametrize("where,recipe", RECIPES, ids=[f"{w}-{i}" for i, (w, _) in enumerate(RECIPES)])
def test_documented_recipe_runs_as_written(documented_files, monkeypatch, capsys, where, recipe):
    monkeypatch.chdir(documented_files)
    exec(compile(recipe, where, "exec"), {})
    assert "config_id" in capsys.readouterr().out  # each shows configurations


def test_selections_and_joins_keep_the_attrs(cache):
    """pandas compares the attrs of the frames it combines: a DataFrame among them raised."""
    from mpitune.analysis import load

    results, timeline = load(str(cache))
    best = results[results.status == "ok"].nsmallest(3, "time_ms")
    assert best.attrs["param_names"] == ["STEP", "MODE"]
    assert run_table(best)["strategy"].tolist() == ["brute_force"]
    joined = timeline.merge(results[["config_id", "STEP"]], on="config_id")
    assert joined.attrs["runs"] == results.attrs["runs"] and len(joined)
