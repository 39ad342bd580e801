"""What importing mpitune pulls in: neither MPI nor CuPy until a run needs them."""

import subprocess
import sys

from conftest import mpi_env


def test_import_needs_neither_mpi_nor_cupy_nor_hdf5():
    code = ("import sys, mpitune, mpitune.cli, mpitune.spec.load, mpitune.strategies, mpitune.backends; "
            "print(sorted(m for m in ('mpi4py', 'cupy', 'h5py') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
