"""Faults: how a run that cannot go on ends, on every rank, and what it keeps.

Start here to change what happens when a rank falls silent, a signal comes, a write fails or a
rank crashes. The normal path (run.py, rounds.py) calls in here and knows of faults only
``SilentRanks`` (transport.py) and the table of exit codes (mpitune/exits.py). It is the same
whichever policy hands out the work (handouts.py: refill or batches): every order a worker
holds is due on its own.

How does a silent rank end the job? Its heartbeats stop (``heartbeat`` notices within the
liveness timeout; ``liveness`` keeps who was heard when), or its order's deadline passes
(``deadlines``, on the rule of process/deadline.py, and comm.py's receive raises
``SilentRanks``). Rank 0 records every report that did arrive, a whole hand-out's held reports
too, and keeps the lost chunks in the file as in flight (``silent_round``); then whichever of
its threads noticed first closes the file and ends every rank with ``ExitCode.RESUMABLE``
(``ending``). ``guard`` starts the heartbeats with MPI and hands rank 0's heartbeat thread the
file once it is open. Neither thread assigns the Manager's state: they ask its methods
(``request_stop``, ``stop_for_silence``).

- a rank stopped or lost before MPI is up: a watcher process per rank (``start_watch``);
- tasks that MPI does not see as one job (srun's plugin or a launcher not of the library, tasks
  of a Slurm job started apart): refused, or warned of, before anything is written (``world``);
- signals: the first lets the ranks finish the configuration they measure and stops handing
  out work, a second Ctrl-C ends the job at once (``signals``);
- every abort, its last line forwarded first, and the exit code of each failure of a rank's
  run: a Ctrl-C outside the rounds, a write the system refused, a bug (``aborting``).

A subpackage of scheduling because the heartbeats and the abort need MPI, which only
scheduling imports. docs/reliability.md says why each limit is what it is, as measured.
"""
