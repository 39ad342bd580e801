"""Scheduling: who measures what, and when to stop.

``loop`` runs a job over a ``transport`` (MPI in production, ``comm``); rank 0's ``manager``
keeps budget, ``batching``, strategy and cache, and each rank's side is in ``rank``; what
travels between them is in ``messages``; ``session`` starts and ends a run on rank 0;
``deadlines`` says how long a rank may stay silent before the run is ended.
Only ``comm`` and ``loop`` import mpi4py.
"""
