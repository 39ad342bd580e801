"""Faults: how a run that cannot go on ends, on every rank, and what it keeps.

Start here to change what happens when a rank falls silent, a signal comes, a write fails or a
rank crashes. The normal path (loop.py, rounds.py) calls in here and knows of faults only
``SilentRanks`` (transport.py) and the table of exit codes (mpitune/exits.py).

How does a silent rank end the job? Its heartbeats stop (``heartbeat`` notices within the
liveness timeout; ``liveness`` keeps who was heard when), or its batch's deadline passes
(``deadlines``, on the rule of process/deadline.py, and comm.py's gather raises
``SilentRanks``). Rank 0 records what did arrive and keeps the lost chunks in the file as in
flight (``silent_round``); then whichever of its threads noticed first closes the file and ends
every rank with ``ExitCode.RESUMABLE`` (``ending``). ``guard`` starts the heartbeats with MPI
and hands rank 0's heartbeat thread the file once it is open.

- a rank stopped or lost before MPI is up: a watcher process per rank (``start_watch``);
- signals: the first drains the batch in flight, a second Ctrl-C ends the job at once
  (``signals``);
- every abort, its last line forwarded first, and the exit code of each failure of a rank's
  run: a Ctrl-C outside the rounds, a write the system refused, a bug (``aborting``).

A subpackage of scheduling because the heartbeats and the abort need MPI, which only
scheduling imports. docs/reliability.md says why each limit is what it is, as measured.
"""
