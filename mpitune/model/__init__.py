"""The data and its meaning.

Problems, search spaces, restrictions, results, timelines, the objective and the results schema.
It knows no MPI, GPU, HDF5 or files. Every other room builds on it."""
