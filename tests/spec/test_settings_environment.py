"""Run settings that an environment variable may also set: the merge order the table gives
(spec/setting_rows.py, ``SOURCES``), the refusal of a bad variable, and the typed ``Overrides``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpitune.errors import UserError
from mpitune.spec.checker import Checker
from mpitune.spec.setting_rows import SOURCES
from mpitune.spec.settings import Overrides, run_settings, search_fields
from mpitune.spec.settings_table import (
    CACHE_PATH,
    ISOLATE,
    LIVENESS_TIMEOUT,
    MAX_FEVALS,
    RANK_DEADLINE_FLOOR,
    SCHEDULE,
    SETTINGS,
)

REPO = Path(__file__).resolve().parents[2]
FLOOR = "MPITUNE_RANK_DEADLINE_FLOOR_S"
LIVENESS = "MPITUNE_LIVENESS_TIMEOUT_S"
# Variables of a process or a site, not of one run: no flag of the tuning run sets them.
PROCESS_VARIABLES = {
    "MPITUNE_FILE_LOCKING": "store/lock.py: whether the file system has locks",
    "MPITUNE_KERNEL_CACHE": "backends/kernel_cache.py: the folder of compiled kernels",
    "MPITUNE_KERNEL_CACHE_MAX_MB": "backends/kernel_cache.py: that folder's bound",
    "MPITUNE_KT_JSON_MAX_MB": "store/measured.py: what a Kernel Tuner cache may expand to",
    "MPITUNE_MPIEXEC": "api/launch.py: the mpiexec of tune_kernel's jobs",
    "MPITUNE_MPI_START_TIMEOUT_S": "faults/start_watch.py: read before the command line's flags matter",
    "MPITUNE_LAUNCHER": "cli/job.py: the job verb's --launcher",
    "MPITUNE_SRUN_MPI": "cli/job.py: the job verb's --srun-mpi",
    "MPITUNE_SRUN_WAIT_S": "cli/job.py: the job verb's --srun-wait",
    "MPITUNE_REQUEUE": "cli/job.py: the job verb's --requeue",
    "MPITUNE_MARGIN_S": "cli/job.py: the job verb's --margin",
}


def settings(overrides: Overrides | None = None):
    return run_settings(Checker("spec.py"), search_fields(), overrides or Overrides())


def test_every_mpitune_variable_is_a_run_setting_s_or_a_process_s():
    """A new variable is placed: a row of the table (a run's, with its flag) or a process's."""
    found = set()
    for path in (REPO / "mpitune").rglob("*.py"):
        found |= set(re.findall(r"MPITUNE_[A-Z_0-9]+", path.read_text()))
    rows = {s.variable.name for s in SETTINGS if s.variable is not None}
    assert rows == {FLOOR, LIVENESS}
    assert found == rows | set(PROCESS_VARIABLES)
    assert all(s.flag is not None for s in SETTINGS if s.variable is not None)


def test_the_docs_state_the_table_s_order():
    assert " > ".join(SOURCES) in " ".join((REPO / "docs" / "spec.md").read_text().split())


def test_the_command_line_wins_over_the_environment_which_wins_over_the_default(monkeypatch):
    monkeypatch.delenv(FLOOR, raising=False)
    assert settings().rank_deadline_floor_s is None  # scheduling's default, 45 s
    monkeypatch.setenv(FLOOR, "9")
    assert settings().rank_deadline_floor_s == 9.0
    assert settings(Overrides(rank_deadline_floor_s=5.0)).rank_deadline_floor_s == 5.0
    assert LIVENESS_TIMEOUT.merged(5.0, environ={LIVENESS: "9"}) == 5.0
    assert LIVENESS_TIMEOUT.merged(None, environ={LIVENESS: "9"}) == 9.0
    assert LIVENESS_TIMEOUT.merged(None, environ={LIVENESS: " "}) is None  # empty: unset
    assert LIVENESS_TIMEOUT.merged(None, environ={LIVENESS: "0"}) == 0.0  # heartbeats off


def test_a_setting_without_a_variable_ignores_the_environment():
    assert MAX_FEVALS.merged(None, 7, environ={"MPITUNE_MAX_FEVALS": "3"}) == 7
    assert SCHEDULE.merged(None) == "auto"


@pytest.mark.parametrize("text", ["soon", "nan", "-1", "inf"])
def test_a_variable_that_is_no_number_of_seconds_is_refused_not_replaced(text):
    """nan passed every check and turned the heartbeats off; "soon" fell back to the default."""
    with pytest.raises(UserError, match=f"^environment variable {LIVENESS}: .*'{text}'"):
        LIVENESS_TIMEOUT.merged(None, environ={LIVENESS: text})


@pytest.mark.parametrize("text", ["soon", "nan", "0", "-5"])
def test_a_floor_variable_of_no_positive_seconds_is_refused(monkeypatch, text):
    """A floor of 0 s would call every rank silent at once."""
    with pytest.raises(UserError, match=f"^environment variable {FLOOR}: "):
        RANK_DEADLINE_FLOOR.merged(None, environ={FLOOR: text})
    monkeypatch.setenv(FLOOR, text)
    with pytest.raises(UserError, match=f"^environment variable {FLOOR}: "):
        settings()


def test_overrides_are_read_by_row_and_left_out_ones_are_the_default():
    given = Overrides(max_fevals=3, cache_path="", isolate=False)
    assert (given[MAX_FEVALS], given[CACHE_PATH], given[ISOLATE], given[SCHEDULE]) == (3, None, False, "auto")
    later = given.replaced(max_fevals=4, schedule="batches")
    assert (later[MAX_FEVALS], later[ISOLATE], later[SCHEDULE]) == (4, False, "batches")
    with pytest.raises(TypeError, match="no run setting 'max_evals'"):
        given.replaced(max_evals=1)
