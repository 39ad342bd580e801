"""Every abort's last line reaches the person, once, with the exit code asked for: two real MPI
ranks, one of which writes a burst of lines and aborts while the other waits in a collective."""

from __future__ import annotations

import textwrap

from tests.conftest import mpirun

ABORTING = textwrap.dedent(
    """
    import sys
    from mpitune.scheduling.faults.aborting import abort_job
    from mpitune.scheduling.comm import MPI

    if MPI.COMM_WORLD.rank == 1:
        for i in range(200):
            print(f"line {i} before the end", file=sys.stderr)
        abort_job(42, "mpitune: error: the one last line")
    MPI.COMM_WORLD.barrier()  # rank 0 waits here until the abort ends it
    """
)


def test_the_last_line_comes_out_once_and_every_rank_ends_with_the_code(tmp_path):
    script = tmp_path / "abort.py"
    script.write_text(ABORTING)
    done = mpirun(2, [str(script)], tmp_path, timeout=60)
    assert done.returncode == 42, done.stderr
    assert done.stderr.count("mpitune: error: the one last line") == 1
    # What came before is forwarded too, and first.
    assert done.stderr.index("line 199 before the end") < done.stderr.index("mpitune: error: the one last line")
    # The rank's MPI library says nothing after it (MPICH's own line about the abort); what the
    # launcher itself prints about the abort (Open MPI's mpirun) is the launcher's.
    assert "called MPI_Abort" not in done.stderr, done.stderr[-2000:]
