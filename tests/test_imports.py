"""What importing mpitune pulls in: neither MPI nor CuPy nor HDF5 until a run needs them, and
never Kernel Tuner, which only the tests use (to check our exports against it)."""

import json
import subprocess
import sys

from conftest import REPO, heavy_imports, mpi_env


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


# What the test extra adds beyond pytest and pytest-mpi, and the optional extras: a machine may
# lack any of them (a GPU machine set up for CuPy alone has no Kernel Tuner, pandas or browser).
OPTIONAL = ("kernel_tuner", "jsonschema", "pandas", "matplotlib", "plotly", "playwright", "pynvml", "cupy", "build")

HIDE = """
import importlib.abc, sys
HIDDEN = set({hidden!r})
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Hide())
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", {tests!r}]))
"""


def test_the_suite_collects_without_any_optional_package(tmp_path):
    """A test that needs an optional package skips with its reason; none stops the collection,
    so the GPU suite runs on a machine that has CuPy and nothing else of the extras."""
    script = tmp_path / "collect.py"
    script.write_text(HIDE.format(hidden=OPTIONAL, tests=str(REPO / "tests")))
    out = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "error" not in out.stdout.splitlines()[-1], out.stdout[-3000:]
