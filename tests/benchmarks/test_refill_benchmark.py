"""benchmarks/refill.py on the pnpoly cache: the scheduler itself replays the same budget with
batches and refilled, and the table says what each took of one rank's time and what it found."""

import sys

from conftest import REPO, kt_cache

sys.path.insert(0, str(REPO / "benchmarks"))

import refill


def test_the_table_compares_the_schedules_on_the_scheduler_itself(pnpoly, tmp_path, capsys, monkeypatch):
    (tmp_path / pnpoly.name).symlink_to(pnpoly)
    args = [str(tmp_path), "--seeds", "1", "--ranks", "4", "--budget", "24"]
    monkeypatch.setattr(sys, "argv", ["refill.py", *args])
    refill.main()
    out = capsys.readouterr().out
    assert out.startswith("command: PYTHONPATH=. python refill.py ")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith(("pnpoly", "mean"))}
    assert set(rows) == {"pnpoly_RTX_3090", "mean"}
    batches, refilled, score_batches, score_refilled = (float(v) for v in rows["pnpoly_RTX_3090"])
    # 24 configurations on 4 ranks: each schedule takes more than perfect sharing of one rank's
    # time and less than all of it; a score is the best found over the cache's best.
    assert 0.25 < batches < 1.0 and 0.25 < refilled < 1.0
    assert 0.0 < score_batches <= 1.0 and 0.0 < score_refilled <= 1.0


def test_brute_force_is_compared_on_both_schedules(tmp_path, capsys):
    refill.brute_force(str(kt_cache(tmp_path / "small.json")), [2])
    out = capsys.readouterr().out
    assert "brute force on small.json" in out
    # Every configuration of the small cache on 2 ranks: each schedule's efficiency is a share.
    (row,) = [line.split() for line in out.splitlines() if line.strip().startswith("2 ")]
    assert 0 < float(row[1]) <= 100 and 0 < float(row[5]) <= 100
