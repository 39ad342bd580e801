"""The Kernel Tuner scripts of examples/kernel_tuner_port with only their imports changed: the C
one tunes here, end to end; the CUDA one's arguments pass the checks (it runs on a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO, mpi_env

from mpitune.api.names import spec_names
from mpitune.spec.load import load_names
from mpitune.spec.settings import Overrides

PORT = REPO / "examples" / "kernel_tuner_port"


def test_the_c_script_tunes_end_to_end(tmp_path):
    """Run as a script is run: its unguarded top-level tune_kernel call must not run again in the
    worker processes that measure."""
    env = {**mpi_env(), "GEMM_N": "48"}
    proc = subprocess.run(
        [sys.executable, str(PORT / "kernel_tuner_script_c.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("mpitune: tuning gemm (C) on 1 rank(s)") == 1
    assert proc.stdout.splitlines()[-1].startswith("32 configurations, 32 passed; best ")
    assert list(tmp_path.iterdir()) == []  # no cache asked for: nothing left behind


def test_the_cuda_scripts_arguments_pass_the_checks(tmp_path, monkeypatch):
    path = PORT / "kernel_tuner_script.py"
    text = path.read_text()
    assert "from kernel_tuner import tune_kernel\n" in text
    text = text.replace("from kernel_tuner import tune_kernel\n", "").replace(
        "from kernel_tuner.observers.nvml import", "from mpitune.observers import"
    )
    called = {}

    def tune_kernel(*args, **kwargs):
        called["names"] = spec_names(*args, kwargs)
        return [], {}

    monkeypatch.setenv("GEMM_N", "32")
    exec(compile(text, str(path), "exec"), {"__file__": str(path), "__name__": "__main__", "tune_kernel": tune_kernel})
    problem, settings = load_names(
        called["names"], "tune_kernel", os.getcwd(), Overrides(cache_path=str(tmp_path / "out.h5")), strict=True
    )
    assert problem.kernel.lang == "cupy" and problem.aim.names == ("GFLOP/s",) and settings.strategy == "brute_force"
    assert problem.kernel.observed_names and [m.name for m in problem.aim.metrics] == ["GFLOP/s", "GFLOP/J"]
