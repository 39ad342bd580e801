"""Rank 0's view of its ranks' devices. How fast each is against the others comes from a reference
every rank times during the search (calibrating.py). The best candidates are timed again on every
rank once the search has ended (confirming.py). No MPI here: the orders carry what to time, and the
reports what was timed."""
