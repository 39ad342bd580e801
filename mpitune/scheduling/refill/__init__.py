"""Refilled runs (``--schedule refill``): each rank is handed work as it runs short, not batch by
batch. What rank 0 hands out and records is ``handouts.py``; its rounds, with its own orders
measured beside them, ``rank0.py``; the workers' side is rounds.py's, unchanged."""
