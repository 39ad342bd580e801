"""The spec: reading a spec file (Kernel Tuner's tune_kernel names), checking every field once on rank 0,
and asking the backends what they support. Knows no MPI, GPU or HDF5."""
