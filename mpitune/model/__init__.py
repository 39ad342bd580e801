"""The data and its meaning: problems, search spaces, restrictions, results, timelines, the objective
and the results schema. Knows no MPI, GPU, HDF5 or files; every other room builds on it."""
