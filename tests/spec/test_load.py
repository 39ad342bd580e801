"""Spec validation: every broken spec names the file and the field, in one line."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from conftest import heavy_imports, mpirun, write_scale_spec

from mpitune.errors import SpecError
from mpitune.model.judging.racing import RaceRule
from mpitune.model.problem import Schedule
from mpitune.spec.load import load_spec
from mpitune.spec.settings import Overrides

GOOD = """
import numpy as np
n = 64
kernel_name = "scale"
kernel_source = "scale.c"
lang = "C"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
answer = [2 * np.ones(n, np.float32), None, None]
tune_params = {"STEP": [1, 2, 4], "MODE": [0]}
restrictions = ["STEP * 2 <= 8"]
"""


def write(tmp_path, text: str):
    write_scale_spec(tmp_path)  # provides scale.c
    spec = tmp_path / "bad.py"
    spec.write_text(textwrap.dedent(text))
    return spec


def test_good_spec_loads_with_defaults(tmp_path):
    problem, settings = load_spec(str(write(tmp_path, GOOD)))
    assert problem.kernel.kernel_name == "scale" and problem.kernel.lang == "C"
    assert "void scale" in problem.kernel.kernel_source
    assert problem.kernel.iterations == 7 and problem.aim.names == ("time",)
    assert settings.strategy == "brute_force" and settings.max_fevals is None
    assert settings.cache_path.endswith("bad.h5")


def test_kernel_tuner_lang_cuda_and_top_level_seed_port_as_they_are(tmp_path):
    spec = write(tmp_path, GOOD.replace('lang = "C"', 'lang = "CUDA"\nseed = 5'))
    problem, settings = load_spec(str(spec))
    assert problem.kernel.lang == "cupy" and settings.seed == 5
    assert load_spec(str(spec), Overrides(seed=7))[1].seed == 7  # the command line wins


def test_default_strategy_follows_the_budget(tmp_path):
    spec = write(tmp_path, GOOD)
    assert load_spec(str(spec), Overrides(max_fevals=10))[1].strategy == "portfolio"
    assert load_spec(str(spec), Overrides(time_limit_s=60))[1].strategy == "portfolio"
    assert load_spec(str(spec), Overrides(max_fevals=10, strategy="random_sample"))[1].strategy == "random_sample"


def test_command_line_overrides_the_spec(tmp_path):
    spec = write(tmp_path, GOOD + 'strategy = "brute_force"\nstrategy_options = {"max_fevals": 5, "seed": 1}\n')
    _, settings = load_spec(
        str(spec), Overrides(strategy="random_sample", max_fevals=2, time_limit_s=9.5, batch_size=3, cache_path="x.h5")
    )
    assert (settings.strategy, settings.max_fevals, settings.time_limit_s, settings.seed, settings.batch_size) == (
        "random_sample",
        2,
        9.5,
        1,
        3,
    )
    assert settings.cache_path.endswith("x.h5")


def test_no_isolation_from_the_command_line(tmp_path):
    spec = write(tmp_path, GOOD)
    assert load_spec(str(spec))[0].kernel.isolate is True
    assert load_spec(str(spec), Overrides(isolate=False))[0].kernel.isolate is False


def test_an_existing_file_that_is_not_hdf5_is_the_stores_to_refuse(tmp_path, monkeypatch):
    """The spec layer checks that the results file can be written; whether an existing one is
    HDF5 the scheduler asks the store at start-up (tests/data/bad_specs/cache_not_hdf5.py)."""
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path, GOOD + "cache = 'scale.c'\n")
    assert load_spec(str(spec))[1].cache_path == str(tmp_path / "scale.c")


def test_loading_a_spec_needs_neither_mpi_nor_a_gpu_nor_hdf5(tmp_path):
    spec = write(tmp_path, GOOD)
    assert heavy_imports("from mpitune.spec.load import load_spec; load_spec(sys.argv[1])", str(spec)) == []


# (what to change in GOOD, the field the message must name, a phrase it must contain)
BROKEN = [
    ("tune_params = {'STEP': [1, 2]\n", "syntax", "line"),
    ("raise RuntimeError('boom')\n", "line", "boom"),
    ("tune_param = {'STEP': [1]}\n", "tune_param", "did you mean 'tune_params'"),
    ("restriction = ['STEP > 1']\n", "restriction", "did you mean 'restrictions'"),
    ("kernel_nme = 'x'\n", "kernel_nme", "kernel_name"),
    ("tune_params = {'STEP': []}\n", "tune_params", "empty"),
    ("tune_params = {'STEP': [1, 1]}\n", "tune_params", "more than once"),
    ("tune_params = {'STEP': 4}\n", "tune_params", "list"),
    ("tune_params = {}\n", "tune_params", "required"),
    ("tune_params = {'STEP': [1, 'a']}\n", "tune_params", "mixes"),
    ("tune_params = {'time_ms': [1]}\n", "tune_params", "reserved"),
    ("tune_params = {'STEP': [1, 2**63]}\n", "tune_params", "'STEP' has value 9223372036854775808, outside the 64"),
    ("tune_params = {'STEP': [-2**63 - 1]}\n", "tune_params", "value -9223372036854775809, outside the 64"),
    ("tune_params = {'STEP': [1.0, float('inf')]}\n", "tune_params", "value inf; values must be finite"),
    ("tune_params = {'STEP': [float('nan')]}\n", "tune_params", "value nan; values must be finite"),
    ("tune_params = {f'P{i}': [1, 2, 3] for i in range(19)}\n", "tune_params", "has 1,162,261,467 configurations"),
    ("restrictions = ['STEP < 7**(10**12)']\n", "restrictions", "computes 7 ** 10 ** 12, about 2.81e+12 bits"),
    ("restrictions = ['STEP >']\n", "restrictions", "does not parse"),
    ("restrictions = ['STEPS > 1']\n", "restrictions", "STEPS"),
    ("restrictions = ['__import__(\"os\")']\n", "restrictions", "calls"),
    ("restrictions = [42]\n", "restrictions", "neither"),
    ("restrictions = [lambda STEP, MODE: STEP > 1]\n", "restrictions", "<lambda> (line 11) takes (STEP, MODE), but"),
    ("def fits():\n    return True\nrestrictions = fits\n", "restrictions", "fits (line 11) takes (), but a callable"),
    ("answer = [None]\n", "answer", "1 entries"),
    ("answer = [np.zeros(3), None, None]\n", "answer", "shape"),
    ("kernel_source = 'missing.c'\n", "kernel_source", "not found"),
    ("del kernel_name\n", "kernel_name", "required"),
    ("arguments = [np.zeros(4), 3]\n", "arguments", "np.int32"),
    ("arguments = 'x'\n", "arguments", "required"),
    ("iterations = 0\n", "iterations", "at least 1"),
    ("iterations = 2.5\n", "iterations", "integer"),
    ("atol = -1\n", "atol", "at least 0"),
    ("timeout_s = float('inf')\n", "timeout_s", "not a finite number: inf"),
    ("strategy_options = {'time_limit': float('nan')}\n", "time_limit", "not a finite number: nan"),
    ("lang = 'fortran'\n", "lang", "must be one of"),
    ("strategy = 'nope'\n", "strategy", "unknown strategy"),
    ("strategy_options = {'max_fevals': 0}\n", "max_fevals", "at least 1"),
    ("strategy_options = {'time_limit': 'soon'}\n", "time_limit", "number"),
    ("strategy = 'pso'\nstrategy_options = {'swarm_size': 0}\n", "strategy_options", "swarm_size must be in [1, 1e6]"),
    ("strategy = 'pso'\nstrategy_options = {'swarm': 8}\n", "strategy_options", "swarm_size (integer in [1, 1e6]"),
    ("objective = 'gflops'\n", "objective", "neither 'time' nor a metric"),
    ("metrics = {'GFLOPS': lambda p: 1.0}\nobjective = 'GFLOP/s'\n", "objective", "'GFLOPS'"),
    ("metrics = [lambda p: 1.0]\n", "metrics", "must be a dict"),
    ("metrics = {'g': lambda p: p['tme']}\n", "metrics", "'g' fails on a sample configuration"),
    ("metrics = {'g': lambda p: undefined_name * p['time']}\n", "metrics", "NameError"),
    ("metrics = {'g': 'STEP * tim'}\n", "metrics", "NameError: name 'tim'"),
    ("metrics = {'g': 'STEP *'}\n", "metrics", "invalid expression"),
    ("metrics = {'g': lambda: 1.0}\n", "metrics", "TypeError"),
    ("metrics = {'g': lambda p: 'fast'}\n", "metrics", "not a number"),
    ("metrics = {'g': 3.0}\n", "metrics", "function of p or an expression"),
    ("metrics = {'STEP': lambda p: 1.0}\n", "metrics", "'STEP' is taken"),
    ("metrics = {'time': lambda p: 1.0}\n", "metrics", "'time' is taken"),
    ("metrics = {'b': lambda p: p['a'], 'a': lambda p: 1.0}\n", "metrics", "'b' fails"),
    ("objective_higher_is_better = 'yes'\n", "objective_higher_is_better", "True or False"),
    ("racing = 'fast'\n", "racing", "'first', 'majority', 'spread'"),
    ("confirm = 17\n", "confirm", "from 0 to 16, got 17"),
    ("schedule = 'eager'\n", "schedule", "must be one of 'auto', 'batches', 'refill', got 'eager'"),
    ("schedule = True\n", "schedule", "must be one of 'auto', 'batches', 'refill', got True"),
    ("confirm = -1\n", "confirm", "number of candidates"),
    ("confirm = 'yes'\n", "confirm", "True, False or a number"),
    ("compiler_options = '-O2'\n", "compiler_options", "list of strings"),
    ("problem_size = (1, 2, 3, 4)\n", "problem_size", "1 to 3"),
    ("texmem_args = {}\n", "texmem_args", "does not support"),
    ("grid_div_x = ['nope']\n", "grid_div_x", "not a tunable parameter"),
    ("prior = 3\n", "prior", "must be a path or a list of paths"),
    ("prior = ['']\n", "prior", "must be a path or a list of paths"),
    ("prior = 'elsewhere.json'\n", "prior", "file 'elsewhere.json' not found"),
    ("prior_any_kernel = 'yes'\n", "prior_any_kernel", "True or False"),
]


@pytest.mark.parametrize("change,field,phrase", BROKEN, ids=[b[1] + "-" + str(i) for i, b in enumerate(BROKEN)])
def test_broken_spec_names_file_and_field(tmp_path, change, field, phrase):
    spec = write(tmp_path, GOOD + change)
    with pytest.raises(SpecError) as err:
        load_spec(str(spec))
    message = str(err.value)
    assert message.startswith(str(spec))
    assert field in message and phrase in message
    assert "\n" not in message


def test_the_budget_is_named_where_an_option_is_unknown_not_where_a_value_is_bad(tmp_path):
    """An unknown name may be a budget entry misspelled; a bad value of a known option is not."""
    unknown = write(tmp_path, GOOD + "strategy = 'pso'\nstrategy_options = {'max_feval': 8}\n")
    with pytest.raises(SpecError, match=r"no option 'max_feval'.*\(and the budget: max_fevals, time_limit, seed\)"):
        load_spec(str(unknown))
    bad = write(tmp_path, GOOD + "strategy = 'pso'\nstrategy_options = {'inertia': 3}\n")
    with pytest.raises(SpecError) as err:
        load_spec(str(bad))
    assert str(err.value).endswith("strategy_options: strategy 'pso': inertia must be in [0, 2], got 3")


def test_the_64_bit_integers_are_all_kept(tmp_path):
    spec = write(tmp_path, GOOD + "tune_params = {'STEP': [-2**63, 2**63 - 1]}\nrestrictions = None\n")
    assert load_spec(str(spec))[0].kernel.tune_params == {"STEP": [-(2**63), 2**63 - 1]}


def test_helper_names_in_a_spec_are_fine(tmp_path):
    spec = write(tmp_path, GOOD + "rng = np.random.default_rng(1)\nsize = 8\ndef helper():\n    pass\n")
    load_spec(str(spec))


def test_callable_restrictions_are_kept(tmp_path):
    problem, _ = load_spec(str(write(tmp_path, GOOD + "restrictions = [lambda c: c['STEP'] != 2]\n")))
    assert callable(problem.restrictions[0])


def test_missing_spec_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(str(tmp_path / "nothing.py"))


@pytest.mark.parametrize("change", ["tune_param = {'STEP': [1]}\n", "tune_params = {'STEP': [1, 2]\n"])
def test_broken_spec_ends_every_rank_with_code_2_and_one_line(tmp_path, change):
    import time

    spec = write(tmp_path, GOOD + change)
    start = time.monotonic()
    # Every rank prints the exit code mpitune's main returned to it, in one write: no interleaving.
    proc = mpirun(
        3,
        ["-c", "import sys, mpitune.cli as c; sys.stdout.write(f'exit {c.main(sys.argv[1:])}\\n')", str(spec)],
        tmp_path,
        timeout=60,
    )
    elapsed = time.monotonic() - start
    assert proc.stdout.split().count("exit") == 3
    assert proc.stdout.count("exit 2") == 3, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mpitune: error: ") and str(spec) in lines[0]
    assert "Traceback" not in proc.stderr
    assert elapsed < 20


def test_debug_shows_the_traceback(tmp_path):
    spec = write(tmp_path, GOOD + "raise RuntimeError('boom')\n")
    proc = mpirun(1, ["-m", "mpitune", str(spec), "--debug"], tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "boom" in proc.stderr


def test_mpiexec_exit_code_is_2_for_a_broken_spec(tmp_path):
    spec = write(tmp_path, GOOD + "tune_params = {'STEP': []}\n")
    proc = mpirun(2, ["-m", "mpitune", str(spec)], tmp_path, timeout=60)
    assert proc.returncode == 2
    assert np.char.count(proc.stderr, "mpitune: error").item() == 1


def test_metrics_objective_and_direction_load_in_order(tmp_path):
    """Metrics keep their order, see earlier ones and the spec's names; workers get none."""
    spec = write(
        tmp_path,
        GOOD + "metrics = {'GFLOP/s': lambda p: 2 * n / 1e9 / (p['time'] / 1e3),\n"
        "           'per_step': 'time / STEP * n',\n"
        "           'twice': lambda p: 2 * p['GFLOP/s']}\n"
        "objective = 'GFLOP/s'\nobjective_higher_is_better = True\n",
    )
    problem, _ = load_spec(str(spec))
    metrics = problem.aim.metrics
    assert [m.name for m in metrics] == ["GFLOP/s", "per_step", "twice"]
    assert problem.aim.names == ("GFLOP/s",) and problem.aim.directions == (True,)
    p = {"STEP": 2, "MODE": 0, "time": 4.0}
    assert metrics[1].fn(p) == 4.0 / 2 * 64  # the expression sees p's names and the spec's n
    assert metrics[1].text == "time / STEP * n"
    assert not hasattr(problem.for_workers(), "aim") and len(metrics) == 3  # the workers get the kernel alone
    assert "metrics" not in problem.identity().record() and "observed_names" not in problem.identity().record()


@pytest.mark.parametrize(
    "written,candidates",
    [("", 5), ("confirm = True\n", 5), ("confirm = False\n", 0), ("confirm = 0\n", 0), ("confirm = 12\n", 12)],
)
def test_confirm_is_on_by_default_and_takes_a_number_of_candidates(tmp_path, written, candidates):
    _, settings = load_spec(str(write(tmp_path, GOOD + written)))
    assert settings.confirm == candidates


def test_the_command_line_overrides_the_specs_confirm(tmp_path):
    _, settings = load_spec(str(write(tmp_path, GOOD + "confirm = 8\n")), Overrides(confirm=0))
    assert settings.confirm == 0


@pytest.mark.parametrize(
    "written,on,rule",
    [
        ("", True, RaceRule.FIRST),
        ("racing = True\n", True, RaceRule.FIRST),
        ("racing = 'first'\n", True, RaceRule.FIRST),
        ("racing = 'majority'\n", True, RaceRule.MAJORITY),
        ("racing = 'spread'\n", True, RaceRule.SPREAD),
        ("racing = False\n", False, RaceRule.FIRST),
    ],
)
def test_racing_is_on_the_first_launch_by_default_and_takes_a_rule(tmp_path, written, on, rule):
    _, settings = load_spec(str(write(tmp_path, GOOD + written)))
    assert (settings.racing, settings.race_rule) == (on, rule)
    _, given = load_spec(str(write(tmp_path, GOOD + written)), Overrides(racing="majority"))
    assert (given.racing, given.race_rule) == (True, RaceRule.MAJORITY)  # the command line wins


@pytest.mark.parametrize(
    "written,schedule",
    [
        ("", Schedule.AUTO),
        ("schedule = 'auto'\n", Schedule.AUTO),
        ("schedule = 'batches'\n", Schedule.BATCHES),
        ("schedule = 'refill'\n", Schedule.REFILL),
    ],
)
def test_the_schedule_is_the_scheduler_s_choice_by_default_and_the_command_line_wins(tmp_path, written, schedule):
    _, settings = load_spec(str(write(tmp_path, GOOD + written)))
    assert settings.schedule is schedule
    _, given = load_spec(str(write(tmp_path, GOOD + written)), Overrides(schedule="batches"))
    assert given.schedule is Schedule.BATCHES


def test_priors_are_the_spec_s_relative_to_its_folder_then_the_command_line_s_each_once(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    for name in ("a.json", "here/b.json"):
        (tmp_path / name).write_text("{}")  # whether each is a prior is found once the space is built
    monkeypatch.chdir(tmp_path / "here")
    spec = write(tmp_path, GOOD + "prior = ['a.json', 'here/b.json']\n")
    _, settings = load_spec(str(spec), Overrides(prior=("b.json", "../a.json"), prior_any_kernel=True))
    assert settings.prior == (str(tmp_path / "a.json"), str(tmp_path / "here" / "b.json"))
    assert settings.prior_any_kernel
    _, plain = load_spec(str(write(tmp_path, GOOD)))
    assert plain.prior == () and not plain.prior_any_kernel
