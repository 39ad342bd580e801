"""What importing mpitune pulls in: neither MPI nor CuPy nor HDF5 until a run needs them, and
never Kernel Tuner, which only the tests use (to check our exports against it)."""

import json
import subprocess
import sys

from conftest import heavy_imports, mpi_env


def test_import_needs_neither_mpi_nor_cupy_nor_hdf5():
    assert heavy_imports("import mpitune, mpitune.cli, mpitune.spec.load, mpitune.strategies, mpitune.backends") == []


def test_import_never_needs_kernel_tuner():
    """The test extra installs it (so that this could fail); our exports and the import write and
    read its format without it."""
    code = (
        "import importlib.util, json, sys; "
        "import mpitune, mpitune.cli, mpitune.offline.exchange, mpitune.offline.kt_import, mpitune.store.measured; "
        "print(json.dumps([importlib.util.find_spec('kernel_tuner') is not None, "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('kernel_tuner', 'jsonschema'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, []]
