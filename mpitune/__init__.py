"""mpitune: batch auto-tuning of GPU (and C) kernels over MPI ranks.

Importing the package touches neither MPI nor a GPU: mpi4py is imported by the
scheduling layer when a run starts, and CuPy only by the CuPy backend.
"""

__version__ = "0.1.0"
