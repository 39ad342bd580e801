"""Runs the pytest-mpi tests under a real mpiexec, and proves any rank's failure counts."""

from conftest import REPO, mpirun


def test_mpi_marked_tests_pass_on_two_ranks():
    proc = mpirun(
        2,
        [
            "-m",
            "pytest",
            "--with-mpi",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests" / "scheduling" / "test_comm.py"),
        ],
        REPO,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("9 passed") == 2  # one summary per rank


def test_a_failure_on_rank_one_fails_the_run():
    proc = mpirun(
        2,
        [
            "-m",
            "pytest",
            "--with-mpi",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(REPO),
            "-c",
            str(REPO / "setup.cfg"),
            str(REPO / "tests" / "data" / "rank_failure_probe.py"),
        ],
        REPO,
        timeout=240,
    )
    assert "1 failed" in proc.stdout and "1 passed" in proc.stdout
    assert proc.returncode != 0
