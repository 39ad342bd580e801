"""Faults: how a run that cannot go on ends, on every rank, and what it keeps.

Start here to change what happens when a rank falls silent, a signal comes, a write fails or a rank
crashes. The normal path (run.py, rounds.py) knows of faults only ``SilentRanks`` (transport.py) and
the exit codes (mpitune/exits.py).

A silent rank's heartbeats stop (``heartbeat``, ``liveness``), or its order's deadline passes
(``deadlines``; a rank told to hold while other device models search has none: the heartbeats alone
watch it). Rank 0 records every report that did arrive; the lost chunks stay in flight in the
file (``silent_round``). Whichever of its threads noticed first closes the file and ends every rank
with ``ExitCode.RESUMABLE`` (``ending``). ``guard`` starts the heartbeats with MPI. Neither thread
assigns the Manager's state: they call its methods.

Also here: a watch on each rank's MPI start (``start_watch``); tasks MPI does not see as one job,
refused before any write (``world``); signals (``signals``); and every abort, with its last line and
exit code (``aborting``).

A subpackage of scheduling because the heartbeats and the abort need MPI, which only scheduling
imports. docs/reliability.md says why each limit is what it is.
"""
