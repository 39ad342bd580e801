"""What importing mpitune pulls in: neither MPI nor CuPy nor HDF5 until a run needs them."""

from conftest import heavy_imports


def test_import_needs_neither_mpi_nor_cupy_nor_hdf5():
    assert heavy_imports("import mpitune, mpitune.cli, mpitune.spec.load, mpitune.strategies, mpitune.backends") == []
