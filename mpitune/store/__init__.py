"""The HDF5 file: its layout from the schema, the one writer, readers, locking, integrity and repair.
The only room that imports h5py."""
