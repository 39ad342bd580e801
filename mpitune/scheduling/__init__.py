"""Scheduling: who measures what, and when to stop.

``loop`` runs a job over a ``transport`` (MPI in production, ``comm``) and its ``rounds``;
rank 0's ``manager`` keeps budget, ``batching``, strategy and cache, and each rank's side is in
``rank``; what travels between them is in ``messages``; ``session`` starts and ends a run on
rank 0. ``faults/`` holds how a run that cannot go on ends: a silent rank, signals, aborts.
mpi4py is imported by ``comm`` and ``faults.heartbeat`` only; ``loop``, ``faults.guard`` and
``faults.aborting`` reach MPI through ``comm``.
"""
