"""benchmarks/fidelity.py on real C runs made here, on 1, 2 and 4 ranks, racing and not: each
replay's simulated clock gives the run's wall time and each rank's phase sums within 10 %
(held to the run's own recorded phases, which is what the clock reproduces, so a busy machine's
noise is in both), and the tables say so."""

import sys

import pytest
from conftest import REPO, mpitune, write_scale_spec

sys.path.insert(0, str(REPO / "benchmarks"))

import fidelity

from mpitune.store.reader import read

RUNS = ((1, True), (2, False), (4, True))


def make_runs(tmp_path_factory) -> list[str]:
    """One real run per (ranks, racing) of RUNS, of six configurations (three of them verify_failed)."""
    files = []
    for ranks, racing in RUNS:
        tmp = tmp_path_factory.mktemp(f"run{ranks}{'r' if racing else ''}")
        spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4], "MODE": [0, 2]}', extra=f"racing = {racing}\n")
        out = tmp / f"c{ranks}{'r' if racing else ''}.h5"
        proc = mpitune(ranks, [str(spec), "--cache", str(out)], tmp)
        assert proc.returncode == 0, proc.stderr
        files.append(str(out))
    return files


@pytest.fixture(scope="module")
def c_runs(tmp_path_factory):
    return make_runs(tmp_path_factory)


def test_replays_of_real_c_runs_keep_their_wall_time_and_phases(c_runs, capsys, tmp_path_factory):
    if fidelity.main([*c_runs, "--check"]) != 0:
        # Once more, with new runs: a real run that a burst of other work on this shared machine
        # slowed between its phases (where the clock charges the run's mean) is noise; an error
        # of the clock repeats.
        first = capsys.readouterr().out
        c_runs[:] = make_runs(tmp_path_factory)
        assert fidelity.main([*c_runs, "--check"]) == 0, first + capsys.readouterr().out
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "command: python benchmarks/fidelity.py " + " ".join([*c_runs, "--check"])
    walls = [line.split(" | ") for line in lines if line.startswith("| c") and line.count("|") == 8]
    assert [(w[0], int(w[1])) for w in walls] == [("| c1r.h5", 1), ("| c2.h5", 2), ("| c4r.h5", 4)]
    # Racing as the run raced where it raced some configuration (a run with racing on may race
    # none of six), not at all where it did not.
    raced = [bool(read(path).results["raced"].any()) for path in c_runs]
    assert [w[3] for w in walls] == ["as recorded" if r else "off" for r in raced] and not raced[1]
    for w in walls:
        real_s, simulated_s, ratio = float(w[4]), float(w[5]), float(w[6].rstrip(" |"))
        # Walls are printed to 0.01 s and the ratio to 0.001: a ratio of the printed walls may be off
        # by their rounding, which weighs more the shorter the run.
        rounding = 0.005 * (1 + ratio) / real_s + 0.0005
        assert abs(ratio - simulated_s / real_s) <= rounding and 0.9 <= ratio <= 1.1
    ranks = [line for line in lines if line.startswith("| c") and line.count("|") > 8]
    assert len(ranks) == 1 + 2 + 4  # one row per rank of each run


def test_check_fails_a_replay_beyond_the_tolerance(c_runs, capsys):
    """A replay held to 0.1 %: some phase of some rank is further off than that."""
    assert fidelity.main([c_runs[0], "--check", "--tolerance", "0.001"]) == 1
    assert "off by more than the tolerance:" in capsys.readouterr().out
