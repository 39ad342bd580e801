"""benchmarks/device_models.py on small Kernel Tuner caches of two and three device models whose
times are correlated: the tables and the JSON agree, and on a space of 40 configurations a budget
of 40 per model measures all of them, so both searches end at the optimum."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_script, write_kt_times

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "device_models.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import device_models  # noqa: E402  (a script beside its siblings, as they import each other)

X, Y = range(1, 9), range(1, 6)  # 40 configurations


def write_cache(path: Path, device: str, scale: float, ripple: float) -> Path:
    """A Kernel Tuner cache of (x, y): a valley around (5, 3), scaled, with a device's own ripple."""
    times: dict[tuple, object] = {
        (x, y): scale * (1.0 + 0.1 * (x - 5) ** 2 + 0.2 * (y - 3) ** 2 + ripple * math.sin(3.0 * x + y) ** 2)
        for x in X
        for y in Y
    }
    return write_kt_times(path, device, times)


def run(*args: Any) -> subprocess.CompletedProcess[str]:
    return run_script(SCRIPT, *args)


@pytest.fixture
def caches(tmp_path: Path) -> list[Path]:
    return [
        write_cache(tmp_path / "conv_A.json", "GPU A", 1.0, 0.3),
        write_cache(tmp_path / "conv_B.json", "GPU B", 2.5, 0.5),
        write_cache(tmp_path / "conv_C.json", "GPU C", 0.7, 0.8),
    ]


def check_model(model: dict[str, Any], budget: int, seeds: int) -> None:
    for search in ("separate", "joint"):
        figures = model[search]
        assert figures["scores"][str(budget)] == 1.0  # every configuration measured: the optimum
        assert figures["rounds"][str(budget)] == 1.0
        reached = figures["reached_at"]
        assert len(reached) == seeds and all(n is not None and 0 < n <= budget for n in reached)
        assert figures["seeds_reached"] == seeds
        assert figures["median_reached_at"] == pytest.approx(float(np.median(reached)))
        assert all(s <= 1.0 for s in figures["scores"].values())  # below 0: worse than the median
        rounds = list(figures["rounds"].values())
        assert rounds == sorted(rounds)  # the best found so far
    a, b = model["separate"], model["joint"]
    assert model["saving"] == pytest.approx(1 - b["median_reached_at"] / a["median_reached_at"])
    assert model["saving_bound"] == "exact"  # both reach the target
    assert model["largest_loss_at"] == pytest.approx(min(0.0, *(b["scores"][k] - a["scores"][k] for k in a["scores"])))
    assert model["largest_loss_rounds"] == pytest.approx(
        min(0.0, *(b["rounds"][k] - a["rounds"][k] for k in a["rounds"]))
    )
    assert model["largest_loss_rounds"] <= model["largest_loss_at"]  # the counts asked inside a round aside


def test_two_models_share_their_results_and_both_end_at_the_optimum(caches, tmp_path):
    out = tmp_path / "out.json"
    done = run("--set", *caches[:2], "--seeds", 2, "--budget", 40, "--at", 10, 20, 40, "--json", out)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["settings"]["seeds"] == 2 and figures["wall_s"] > 0
    (one,) = figures["sets"]
    assert [m["name"] for m in one["models"]] == ["conv_A", "conv_B"]
    assert [m["ranks"] for m in one["models"]] == [4, 4]
    for model in one["models"]:
        assert list(model["separate"]["rounds"]) == [str(n) for n in range(4, 41, 4)]
        assert list(model["joint"]["scores"]) == ["10", "20", "40"]
        check_model(model, 40, 2)
    assert isinstance(one["goal_met"], bool)

    text = done.stdout
    assert text.startswith("command: python ") and "--budget 40" in text.splitlines()[0]
    assert "## 2 models: conv_A (4 ranks), conv_B (4 ranks)" in text
    assert "| model | separate | seeds reached | joint | seeds reached | saving |" in text
    assert "| model | 10 | 20 | 40 | largest loss there | at any round's end |" in text
    for model in one["models"]:
        a, b = model["separate"], model["joint"]
        row = re.search(rf"^\| {model['name']} \| ([\d.]+) \| 2 \| ([\d.]+) \| 2 \| (-?\d+) % \|$", text, re.M)
        assert row, text
        assert float(row[1]) == a["median_reached_at"] and float(row[2]) == b["median_reached_at"]
        assert int(row[3]) == round(100 * model["saving"])
        assert f"| 1.000 / 1.000 | {model['largest_loss_at']:+.3f} |" in text
    assert re.search(r"^Goal \(every model: saving >= 30 %, .*\): (met|not met)$", text, re.M)
    assert re.search(r"^\(\d+ s\)$", text, re.M)


def test_three_models_split_eight_ranks_three_three_two(caches, tmp_path):
    out = tmp_path / "out.json"
    done = run("--set", *caches, "--seeds", 1, "--budget", 40, "--at", 25, 40, "--json", out)
    assert done.returncode == 0, done.stderr
    (three,) = json.loads(out.read_text())["sets"]
    assert [m["ranks"] for m in three["models"]] == [3, 3, 2]
    assert list(three["models"][0]["separate"]["rounds"]) == [str(n) for n in range(3, 40, 3)] + ["40"]
    for model in three["models"]:
        check_model(model, 40, 1)


def test_a_set_of_one_cache_is_refused(caches):
    done = run("--set", caches[0])
    assert done.returncode == 2 and "a set takes 2 to 8 caches" in done.stderr


def test_the_saving_where_a_search_never_reaches_the_target():
    assert device_models.reduction(60.0, 42.0, 200) == (pytest.approx(0.3), "exact")
    assert device_models.reduction(math.inf, 100.0, 200) == (pytest.approx(0.5), "at least")
    assert device_models.reduction(math.inf, math.inf, 200) == (None, "none")
    assert device_models.reduction(60.0, math.inf, 200) == (None, "none")
    assert device_models.split(8, 2) == [4, 4] and device_models.split(8, 3) == [3, 3, 2]
