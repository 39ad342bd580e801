"""benchmarks/tune_portfolio.py on small Kernel Tuner caches: the search tries every value of an
option's row, keeps a value only on a clear gain, and checks the choice on fresh seeds and on
caches it never saw; a gain is paired by cache and seed; bad arguments end in one line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_script, write_kt_times

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "tune_portfolio.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import tune_portfolio  # noqa: E402  (a script beside its siblings, as they import each other)


def write_cache(path: Path, device: str, ripple: float) -> Path:
    """A rugged valley of 12 x 10 configurations: enough for a design, a model and breeding."""
    times: dict[tuple, object] = {
        (x, y): 1.0 + 0.05 * (x - 7) ** 2 + 0.1 * (y - 4) ** 2 + ripple * math.sin(2.0 * x * y) ** 2
        for x in range(1, 13)
        for y in range(1, 11)
    }
    return write_kt_times(path, device, times)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    tuning, check = tmp_path / "tuning", tmp_path / "check"
    tuning.mkdir()
    check.mkdir()
    write_cache(tuning / "valley_A.json", "GPU A", 0.4)
    write_cache(tuning / "valley_B.json", "GPU B", 0.8)
    write_cache(check / "valley_C.json", "GPU C", 0.6)
    return tuning, check


def test_the_search_tries_a_row_and_checks_the_choice_where_it_was_not_made(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "trials.json"
    args = ["--seeds", 3, "--check-seeds", 2, "--options", "exploration", "--rounds", 1, "--random", 2]
    args += ["--budgets", 20, 40]
    done = run_script(SCRIPT, *dirs, *args, "--jobs", 1, "--json", out)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    default = tune_portfolio.DEFAULTS["exploration"]
    row = len(tune_portfolio.GRID["exploration"]) - 1
    tried = [t["options"].get("exploration", default) for t in record["trials"][1 : 1 + row]]
    assert sorted(tried) == sorted(v for v in tune_portfolio.GRID["exploration"] if v != default)
    assert len(record["trials"]) == 1 + row + 2  # the start, the row, two random combinations
    assert sum(t["kept"] for t in record["trials"][1 : 1 + row]) <= 1  # at most the row's best is kept
    kept = [t for t in record["trials"][1:] if t["kept"]]
    assert record["chosen"] == (kept[-1]["options"] if kept else record["trials"][0]["options"])
    assert len(record["gains"]) == 3 and all(len(g) == 2 for g in record["gains"].values())
    assert "fresh seeds 3..4" in done.stdout and "valley_C" in done.stdout
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("- 20:", "- 40:"))]
    assert len(verdicts) == 2


def test_a_gain_is_paired_by_cache_and_seed() -> None:
    """Two settings whose scores swing alike between seeds differ by their steady gap: the
    paired standard error is that of the gaps, not of the swings."""
    swings = np.array([0.5, 0.9, 0.6, 0.8])[None, :, None] * np.ones((2, 4, 3))
    base = tune_portfolio.Trial({}, swings)
    better = tune_portfolio.Trial({}, swings + np.array([0.01, 0.02, 0.01, 0.02])[None, :, None])
    gain, se = better.gain_over(base)
    assert gain == pytest.approx(0.015)
    assert se == pytest.approx(np.std([0.01, 0.02] * 4, ddof=1) / math.sqrt(8))


@pytest.mark.parametrize(
    "args, says",
    [
        (["--options", "colour"], "no grid for colour"),
        (["--start", "colour=1"], "portfolio has no option 'colour'"),
        (["--start", "exploration=-1"], "exploration must be in"),
    ],
)
def test_bad_arguments_end_in_one_line(dirs: tuple[Path, Path], args: list[str], says: str) -> None:
    done = run_script(SCRIPT, *dirs, *args)
    assert done.returncode != 0
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_every_row_is_an_option_of_the_default_and_holds_its_default() -> None:
    for name, row in tune_portfolio.GRID.items():
        assert tune_portfolio.DEFAULTS[name] in row, name
