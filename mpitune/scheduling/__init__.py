"""Scheduling: who measures what, and when to stop.

``run`` runs a job over a ``transport`` (``comm`` in production) in ``rounds``. Rank 0's ``manager``
keeps the search and ``handouts`` deals it; each rank's side is ``rank``. Failures are ``faults/``;
docs/architecture.md lists every module.
"""
