"""The command line as a user meets it, through real processes: help, version, the output flag,
pipes, Kernel Tuner's names, refusals that take one line, and what a run leaves behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from conftest import kt_cache, mpi_env, mpitune, report_json, write_scale_spec

from mpitune import __version__, backends, commands
from mpitune.scheduling.run import cpu_oversubscribed

TWO_CONFIGS = '{"STEP": [1, 2], "MODE": [0]}'


def offline(args: list[str], cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m mpitune ...`` without mpiexec, as a user on a login node runs it."""
    return subprocess.run(
        [sys.executable, "-m", "mpitune", *args],
        cwd=cwd,
        env=env or mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def recorded_strategies(path: Path) -> list[str]:
    return [r["strategy"] for r in report_json(path)["run_list"]]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A finished run of two configurations, written with --out."""
    tmp = tmp_path_factory.mktemp("cli")
    spec = write_scale_spec(tmp, TWO_CONFIGS)
    proc = mpitune(1, [str(spec), "--out", str(tmp / "out.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr  # one rank on this node: no oversubscription warning
    return tmp / "out.h5"


def test_help_lists_every_command_with_its_line():
    proc = offline(["--help"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for verb in ("tune", "replay", *commands.verbs()):
        assert any(line.split()[:1] == [verb] and len(line.split()) > 3 for line in lines), verb
    assert "--out PATH, --cache PATH" in proc.stdout


@pytest.mark.parametrize("verb", ["tune", "replay"])
def test_help_lists_every_strategy_with_its_options_from_their_tables(verb):
    from mpitune import strategies
    from mpitune.cli.parsers import replay_parser, tune_parser

    text = " ".join((tune_parser() if verb == "tune" else replay_parser()).format_help().split())
    for name in strategies.available():
        assert f" {name} " in text or f" {name}: no options" in text, name
        for option in strategies.options_of(name):
            assert " ".join(option.describe().split()) in text, (name, option.name)


def test_version():
    proc = offline(["--version"])
    assert (proc.returncode, proc.stdout.strip()) == (0, f"mpitune {__version__}")


def test_out_writes_the_results_and_no_lock_file_stays(results):
    assert report_json(results)["configs"] == 2
    assert sorted(p.name for p in results.parent.glob("out.h5*")) == ["out.h5"]


def test_the_older_cache_flag_and_the_tune_verb_still_work(tmp_path):
    spec = write_scale_spec(tmp_path, TWO_CONFIGS)
    proc = mpitune(1, ["tune", str(spec), "--cache", str(tmp_path / "old.h5")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report_json(tmp_path / "old.h5")["configs"] == 2 and not list(tmp_path.glob("*.lock"))


def test_replay_refuses_to_mix_strategies_unless_asked(tmp_path):
    source = kt_cache(str(tmp_path / "c.json"))
    out = str(tmp_path / "replayed.h5")
    first = mpitune(1, ["replay", source, "--output", out, "--strategy", "brute_force"], tmp_path)
    assert first.returncode == 0, first.stderr  # --output: the older name of --out
    again = mpitune(1, ["replay", source, "--out", out, "--strategy", "brute_force"], tmp_path)
    assert again.returncode == 0, again.stderr  # the same strategy resumes
    mixed = mpitune(1, ["replay", source, "--out", out, "--strategy", "random_sample"], tmp_path)
    assert mixed.returncode == 2 and mixed.stderr.count("\n") == 1, mixed.stderr
    assert "holds the replay of strategy brute_force" in mixed.stderr and "--append" in mixed.stderr
    appended = mpitune(1, ["replay", source, "--out", out, "--strategy", "random_sample", "--append"], tmp_path)
    assert appended.returncode == 0, appended.stderr
    assert recorded_strategies(Path(out)) == ["brute_force", "brute_force", "random_sample"]


def test_a_closed_pipe_ends_quietly(results):
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpitune", "report", str(results)],
        env=mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # the reader is gone before the report is written, as `| head` after a line
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and stderr == ""


def test_export_to_standard_output(results, tmp_path):
    proc = offline(["export", str(results), "--format", "kt-json", "--out", "-"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["cache"]) == 2
    assert not list(tmp_path.iterdir())  # no file named "-"


def test_job_outside_slurm_is_one_line(tmp_path):
    env = {k: v for k, v in mpi_env().items() if not k.startswith("SLURM_")}
    proc = offline(["job", str(write_scale_spec(tmp_path))], cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "inside a Slurm allocation" in proc.stderr and not list(tmp_path.glob(".mpitune-stop-*"))


def test_a_results_file_as_spec_is_refused_naming_it(results, tmp_path):
    proc = mpitune(2, [str(results)], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{results} is not a Python spec file" in proc.stderr and "null bytes" not in proc.stderr


def test_kernel_tuner_names_are_taken_and_said_once(tmp_path):
    spec = write_scale_spec(
        tmp_path,
        '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0]}',
        extra="""
        strategy = "diff_evo"
        strategy_options = {"popsize": 3, "max_fevals": 4}
    """,
    )
    proc = mpitune(2, [str(spec), "--out", str(tmp_path / "kt.h5")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("'diff_evo' is Kernel Tuner's name; running 'differential_evolution'") == 1
    assert proc.stderr.count("'popsize' is Kernel Tuner's name; taken as differential_evolution's 'population'") == 1
    assert recorded_strategies(tmp_path / "kt.h5") == ["differential_evolution"]
    with h5py.File(tmp_path / "kt.h5", "r") as f:
        assert len(f["results"]) == 4


@pytest.mark.parametrize(
    "option,says",
    [
        (
            "popsiz",
            "strategy 'genetic_algorithm' has no option 'popsiz'; its options: population (integer in "
            "[2, 1e6], default 20): the elite that breeds the children",
        ),
        ("maxiter", "the budget here is max_fevals or time_limit"),
    ],
)
def test_an_unknown_strategy_option_is_answered_with_the_valid_ones(tmp_path, option, says):
    spec = write_scale_spec(tmp_path, TWO_CONFIGS, extra=f'strategy_options = {{"{option}": 3}}\n')
    proc = mpitune(2, [str(spec), "--strategy", "genetic_algorithm"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{spec}: strategy_options: " in proc.stderr and says in proc.stderr


def test_c_kernels_timed_on_more_ranks_than_cores_warn_once(tmp_path):
    ranks = (os.cpu_count() or 1) + 1
    if ranks > 4:
        pytest.skip(f"{ranks} ranks would be slow here")
    spec = write_scale_spec(tmp_path, TWO_CONFIGS)
    proc = mpitune(ranks, [str(spec)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(f"{ranks} ranks on this node timed C kernels on {ranks - 1} core(s)") == 1
    # GPU timings are not the cores' business, and a replay times nothing.
    assert cpu_oversubscribed(backends.capabilities("cupy"), 8, 2) is None
    assert cpu_oversubscribed(backends.capabilities("replay"), 8, 2) is None


def test_every_kernel_tuner_alias_names_an_option_we_have():
    from mpitune import strategies

    assert set(strategies.KERNEL_TUNER_STRATEGIES.values()) <= set(strategies.available())
    for name, aliases in strategies.KERNEL_TUNER_OPTIONS.items():
        assert set(aliases.values()) <= {option.name for option in strategies.options_of(name)}, name
        assert not set(aliases) & set(strategies.NO_EQUIVALENT), name


def test_liveness_timeout_nan_is_one_line_not_heartbeats_off(tmp_path):
    """nan passed every comparison: --liveness-timeout nan turned the heartbeats off silently."""
    proc = offline([str(write_scale_spec(tmp_path)), "--liveness-timeout", "nan"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "mpitune: error: argument --liveness-timeout: not a finite number: 'nan'" in proc.stderr
    assert not (tmp_path / "spec.h5").exists()


@pytest.mark.parametrize(
    "flags,says",
    [
        (["--liveness-timeout", "-1"], "argument --liveness-timeout: must be at least 0, got '-1'"),
        (["--load-timeout", "0"], "argument --load-timeout: must be greater than 0"),
        (["--time-limit", "inf"], "argument --time-limit: not a finite number: 'inf'"),
        (["--rank-deadline-floor", "nan"], "argument --rank-deadline-floor: not a finite number"),
        (["--device-bias-sd", "-1"], "argument --device-bias-sd: must be at least 0"),
    ],
)
def test_every_seconds_flag_takes_the_one_check(capsys, flags, says):
    """The parsers themselves, in process (the command line above runs the same)."""
    from mpitune.cli.parsers import replay_parser, tune_parser

    parser = replay_parser() if flags[0].startswith("--device") else tune_parser()
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["spec.py", *flags])
    assert ended.value.code == 2 and says in capsys.readouterr().err


def test_a_bad_mpitune_variable_is_one_line_naming_it_not_the_default(tmp_path):
    env = mpi_env() | {"MPITUNE_LIVENESS_TIMEOUT_S": "nan"}
    proc = offline([str(write_scale_spec(tmp_path))], cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "mpitune: error: environment variable MPITUNE_LIVENESS_TIMEOUT_S: not a finite number: 'nan'" in proc.stderr
    assert not (tmp_path / "spec.h5").exists()


@pytest.mark.parametrize(
    "variable,value,says",
    [
        ("MPITUNE_RANK_DEADLINE_FLOOR_S", "-1", "must be greater than 0, got '-1'"),
        ("MPITUNE_MPI_START_TIMEOUT_S", "soon", "not a number: 'soon'"),
        ("MPITUNE_LIVENESS_TIMEOUT_S", "inf", "not a finite number: 'inf'"),
        ("MPITUNE_KERNEL_CACHE_MAX_MB", "lots", "not a number: 'lots'"),
    ],
)
def test_every_watch_variable_is_checked_before_mpi_starts(monkeypatch, variable, value, says):
    from mpitune.cli.running import bad_environment

    assert bad_environment() is None
    monkeypatch.setenv(variable, value)
    assert bad_environment() == f"environment variable {variable}: {says}"
