"""Child processes a rank supervises.

They are the worker that measures, with a deadline per configuration, and the compile workers
that work ahead of the device. This package knows no MPI and no kernel."""
