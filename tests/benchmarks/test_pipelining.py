"""benchmarks/pipelining.py on the pnpoly cache: every rule hands out the budget and simulates a
wall time that no rule of handing out work could beat or exceed, and the table says so."""

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import pipelining
from strategies import Replay

BUDGETS = [16, 32]
RANKS = 4


def test_every_rule_spends_the_budget_within_the_bounds_of_its_ranks(pnpoly):
    cache = Replay.load(str(pnpoly))
    for rule, run in pipelining.RULES.items():
        search = run(cache, "portfolio", 0, BUDGETS, RANKS)
        assert set(search.scores) == set(BUDGETS) and all(0.0 <= s <= 1.0 for s in search.scores.values()), rule
        # 32 configurations on 4 ranks: never faster than perfectly shared, never slower than one rank.
        assert search.serial_s / RANKS <= search.wall_s <= search.serial_s, rule


def test_refill_tells_as_results_come_and_keeps_each_rank_busy(pnpoly):
    """With no batch to wait for, refilling keeps the simulated wall nearer perfect sharing than
    today's batches of one configuration per rank (on this cache and seed: 0.26 and 0.31 of one
    rank's time)."""
    cache = Replay.load(str(pnpoly))
    now = pipelining.RULES["now"](cache, "portfolio", 0, BUDGETS, RANKS)
    refill = pipelining.refill(cache, "portfolio", 0, BUDGETS, RANKS)
    assert refill.wall_s / refill.serial_s < now.wall_s / now.serial_s


def test_the_table_names_its_command_and_every_rule(pnpoly, tmp_path, capsys, monkeypatch):
    (tmp_path / pnpoly.name).symlink_to(pnpoly)
    args = [str(tmp_path), "--seeds", "1", "--ranks", "4", "--budgets", "16", "--brute-force-ranks", "4"]
    monkeypatch.setattr(sys, "argv", ["pipelining.py", *args])
    pipelining.main()
    out = capsys.readouterr().out
    assert out.startswith("command: python pipelining.py ")
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0].lstrip("| ") for row in rows] == ["rule", *pipelining.RULES, "ranks", "4"]
    efficiencies = [float(cell.strip(" |%")) for cell in rows[-1][1:]]  # the scheduler, exact costs (2), pulled
    assert len(efficiencies) == 4 and all(0 < e <= 100 for e in efficiencies)
