"""Priors for real: a C kernel tuned with gcc under ``mpiexec``, starting from Kernel Tuner caches
"measured elsewhere" (conftest's ``scale_prior``), given by the spec and on the command line; what
the file records of them, what ``report`` shows, and what a resumed run does with the same prior
and with a changed one. The refusals of a prior that cannot be one (damaged, missing, of another
kernel, sharing nothing) are in the bad-spec corpus (tests/data/bad_specs/prior_*.py), run on four
ranks by tests/spec/test_bad_input.py."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys

from conftest import mpi_env, mpitune, report_json, scale_prior, write_scale_spec

from mpitune.scheduling.prepare import prepare
from mpitune.spec.load import load_spec

SPACE = '{"STEP": [1, 2, 4, 8], "MODE": [0, 1]}'
# STEP 1, 2 and 4 are in both spaces (8 only in this one, 16 only in the prior's), MODE in this one
# alone, so each of those three STEPs gives both MODEs a time: 6 of the 8 configurations.
MATCHED = 6


def test_the_spec_s_and_the_command_line_s_priors_are_recorded_and_reported(tmp_path):
    scale_prior(tmp_path / "prior.json")
    scale_prior(tmp_path / "elsewhere.json", device="Third CPU")
    spec = write_scale_spec(tmp_path, SPACE, extra='prior = ["prior.json"]\n')
    proc = mpitune(1, [str(spec), "--prior", "elsewhere.json", "--max-fevals", "3", "--out", "out.h5"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = f"prior {tmp_path / 'prior.json'}: Other CPU, problem size [4096], times for {MATCHED} of the 8"
    assert said in proc.stdout
    summary = report_json(tmp_path / "out.h5")
    common = {"run": 0, "kernel_name": "scale", "problem_size": [4096], "shared": ["STEP"], "matched": MATCHED}
    assert summary["prior"] == [  # the spec's first, then the command line's
        {
            **common,
            "path": str(tmp_path / name),
            "device": device,
            "sha256": hashlib.sha256((tmp_path / name).read_bytes()).hexdigest(),
        }
        for name, device in (("prior.json", "Other CPU"), ("elsewhere.json", "Third CPU"))
    ]
    text = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(tmp_path / "out.h5")],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"prior {tmp_path / 'elsewhere.json'}: kernel scale on Third CPU, problem size [4096]; {MATCHED}" in text


def test_a_resumed_run_continues_with_the_same_prior_and_starts_afresh_with_a_changed_one(tmp_path):
    prior = scale_prior(tmp_path / "prior.json")
    spec = write_scale_spec(tmp_path, SPACE, extra='prior = ["prior.json"]\n')
    args = [str(spec), "--max-fevals", "2", "-v"]
    assert mpitune(1, args, tmp_path).returncode == 0
    same = mpitune(1, args, tmp_path)
    assert same.returncode == 0, same.stderr
    assert "resuming the saved state of strategy portfolio" in same.stderr
    document = json.loads(prior.read_text())
    document["cache"]["1,0"]["time"] = 99.0  # measured again elsewhere: the strategy's start differs
    prior.write_text(json.dumps(document))
    changed = mpitune(1, args, tmp_path)
    assert changed.returncode == 0, changed.stderr
    assert "the priors differ from those run 1 started from" in changed.stderr
    assert "resuming the saved state" not in changed.stderr
    digests = [(p["run"], p["sha256"]) for p in report_json(tmp_path / "spec.h5")["prior"]]
    assert [run for run, _ in digests] == [0, 1, 2]
    assert digests[0][1] == digests[1][1] != digests[2][1]


def test_prior_any_kernel_takes_another_kernel_s_times_and_a_failed_one_gives_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scale_prior(tmp_path / "p.json", kernel_name="scale_v1")
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8]}', extra='prior = "p.json"\nprior_any_kernel = True\n')
    setup = prepare(*load_spec(str(spec)))
    assert setup.prior is not None and setup.strategy.prior is setup.prior
    [source] = setup.prior.sources
    assert (source.kernel_name, source.shared, source.matched) == ("scale_v1", ("STEP",), 3)
    # The best over the prior's U of each shared STEP; STEP 2 with U 1 failed there, so 2 has U 0's.
    times = dict(zip((setup.space.config(i)["STEP"] for i in range(len(setup.space))), setup.prior.time_ms[0]))
    assert (times[1], times[2], times[4]) == (10.0, 5.0, 2.5) and math.isnan(times[8])
