"""benchmarks/confirmation.py on one shared cache, briefly (2 seeds, one bias): the command
line first, a row for the cache and one for all, and figures in range: shares of runs are
percentages, the winner is never faster than the true best, and confirming costs something."""

import re
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import confirmation


def test_the_benchmark_prints_its_command_and_figures_in_range(shared_caches, capsys):
    args = [str(shared_caches), "--caches", "pnpoly_RTX_3090", "--seeds", "2", "--biases", "2"]
    assert confirmation.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("command: python ") and lines[0].endswith(" ".join(args))
    assert lines[1].startswith("machine: ")
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and " % | " in line}
    assert set(rows) == {"pnpoly_RTX_3090", "all"}
    for row in rows.values():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "2 %" and cells[2] == "2"
        for share in cells[3:5]:  # confirmed hit, search hit
            assert 0 <= float(share.rstrip(" %")) <= 100
        for pair in cells[5:8]:  # winner and search best over the true best, confirmation's cost
            mean, worst = (float(x) for x in re.findall(r"-?\d+\.\d+", pair))
            assert 0 <= mean <= worst
        assert float(re.findall(r"\d+\.\d+", cells[7])[0]) > 0  # confirming costs time
        assert float(cells[8]) >= 2  # candidates: a confirmation chooses between two at least
