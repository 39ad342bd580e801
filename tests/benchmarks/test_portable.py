"""benchmarks/portable.py on three small Kernel Tuner caches whose portable choice and single-model
winners are known by construction: the printed table and the JSON agree with the hand-worked
ratios, a failed or missing configuration is "not measured", and caches of other parameters are
matched on the ones they share."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_kt_times

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "portable.py"

# Times by (x, y), each model's ratios to its best in the comments (best: A 1, B 2, C 0.5 ms).
#   (1, 1): A 1.0,  B 4.0,  C 2.0  worst 4.0 (A's winner)
#   (2, 1): A 1.2,  B 1.1,  C 1.3  worst 1.3 (the portable choice)
#   (3, 1): A 2.0,  B 1.0,  C 3.0  worst 3.0 (B's winner: the usual practice)
#   (4, 1): failed on A;    C 1.0  (C's winner: not measured on A)
#   (1, 2): A 3.0, missing on B    (so not in every model)
#   (2, 2): A 5.0, B inf (failed), C 5.0
TIMES: dict[str, dict[tuple[int, int], Any]] = {
    "A": {(1, 1): 1.0, (2, 1): 1.2, (3, 1): 2.0, (4, 1): "CompilationFailedConfig", (1, 2): 3.0, (2, 2): 5.0},
    "B": {(1, 1): 8.0, (2, 1): 2.2, (3, 1): 2.0, (4, 1): 3.0, (2, 2): math.inf},
    "C": {(1, 1): 1.0, (2, 1): 0.65, (3, 1): 1.5, (4, 1): 0.5, (1, 2): 0.525, (2, 2): 2.5},
}


def write_cache(
    path: Path, device: str, times: dict[tuple[Any, ...], Any], names: tuple[str, ...] = ("x", "y")
) -> Path:
    return write_kt_times(path, device, times, names)


def run(*args: Any) -> subprocess.CompletedProcess[str]:
    return run_script(SCRIPT, *args, timeout=120)


@pytest.fixture
def caches(tmp_path: Path) -> list[Path]:
    names = {"A": "conv_A.json", "B": "conv_B.json.gz", "C": "conv_C.json"}
    return [write_cache(tmp_path / names[m], f"GPU {m}", TIMES[m]) for m in "ABC"]


def test_the_portable_choice_and_the_usual_practice_as_worked_by_hand(caches, tmp_path):
    done = run(*caches, "--json", tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    (figures,) = json.loads((tmp_path / "out.json").read_text())["sets"]
    assert [m["label"] for m in figures["models"]] == ["A", "B", "C"]
    assert [m["best_ms"] for m in figures["models"]] == [1.0, 2.0, 0.5]
    assert [m["measured"] for m in figures["models"]] == [5, 4, 6]  # failed ones left out
    assert figures["measured_on_every_model"] == 3  # (1, 1), (2, 1), (3, 1)
    chosen = figures["portable"]
    assert chosen["parameters"] == {"x": 2, "y": 1}
    assert chosen["ratios"] == pytest.approx({"A": 1.2, "B": 1.1, "C": 1.3})
    assert chosen["worst_ratio"] == pytest.approx(1.3)
    winners = {w["model"]: w for w in figures["winners"]}
    assert winners["A"]["parameters"] == {"x": 1, "y": 1} and winners["A"]["worst_ratio"] == pytest.approx(4.0)
    assert winners["B"]["parameters"] == {"x": 3, "y": 1} and winners["B"]["worst_ratio"] == pytest.approx(3.0)
    assert winners["C"]["parameters"] == {"x": 4, "y": 1} and winners["C"]["worst_ratio"] is None
    assert winners["C"]["ratios"] == {"A": None, "B": pytest.approx(1.5), "C": 1.0}
    assert figures["usual_practice"] == {"model": "B", "worst_ratio": pytest.approx(3.0)}

    out = done.stdout
    assert "| best time (ms) | 1 | 2 | 0.5 | |" in out
    assert "| **portable choice** | 1.200 | 1.100 | 1.300 | 1.300 |" in out
    assert "| A's winner | 1.000 | 4.000 | 2.000 | 4.000 |" in out
    assert "| C's winner | not measured | 1.500 | 1.000 | not measured |" in out
    assert "| | usual practice (B's winner everywhere) | portable choice |" in out
    assert "| worst ratio | 3.000 | 1.300 |" in out
    assert "on every model: 3." in out
    assert "- portable choice: x=2, y=1" in out


def test_caches_of_other_parameters_are_matched_on_those_they_share(tmp_path):
    # D also tunes z (its best for each (x, y) counts) and fixes w; E has only x and y.
    d = {(1, 1, 0, 7): 1.0, (1, 1, 1, 7): 3.0, (2, 1, 0, 7): 4.0, (2, 1, 1, 7): 1.5}
    e = {(1, 1): 3.0, (2, 1): 1.0}
    paths = [
        write_cache(tmp_path / "k_D.json", "GPU D", d, ("x", "y", "z", "w")),
        write_cache(tmp_path / "k_E.json", "GPU E", e),
    ]
    done = run(*paths, "--json", tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    (figures,) = json.loads((tmp_path / "out.json").read_text())["sets"]
    assert figures["shared_parameters"] == ["x", "y"]
    # (1, 1): D 1.0, E 3.0; (2, 1): D 1.5, E 1.0: (2, 1) with z=1 on D
    assert figures["portable"]["parameters"] == {"x": 2, "y": 1}
    assert figures["portable"]["worst_ratio"] == pytest.approx(1.5)
    assert figures["portable"]["configuration_per_model"]["D"] == {"x": 2, "y": 1, "z": 1, "w": 7}
    assert "(D: z); and of one value, so nothing to choose (w)" in done.stdout
    assert re.search(r"^  - on D: z=1$", done.stdout, re.M)


def test_one_cache_is_refused_in_one_line(caches):
    done = run(caches[0])
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "at least two models" in done.stderr
