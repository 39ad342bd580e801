"""Rank 0's view of its ranks' devices: how fast each is against the others, from a reference
configuration every rank times during the search (calibrating.py), and the best candidates timed
again on every rank once the search has ended (confirming.py). No MPI here: the orders carry
what to time, and the reports what was timed."""
