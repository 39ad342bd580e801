"""Scheduling: who measures what, and when to stop.

``run`` runs a job over a ``transport`` (MPI in production: ``comm``) and its ``rounds``; rank
0's ``manager`` keeps the search, ``handouts`` says who gets work when, each rank's side is
``rank``, and ``faults/`` holds how a run that cannot go on ends. docs/architecture.md lists
every module; mpi4py is imported by ``comm`` and ``faults.heartbeat`` only.
"""
