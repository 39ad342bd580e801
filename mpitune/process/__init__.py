"""Child processes a rank supervises: the worker that measures (with a deadline per configuration)
and the compile workers that work ahead of the device. Knows no MPI and no kernel."""
