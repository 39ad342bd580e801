"""The spec: reading a spec file, with Kernel Tuner's tune_kernel names. Rank 0 checks every
field once, and asks the backends what they support. Knows no MPI, GPU or HDF5."""
