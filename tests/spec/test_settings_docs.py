"""The run settings are declared once, in ``mpitune/spec/settings_table.py``.

docs/spec.md's two tables are rendered from it: the spec's settings after the line
``<!-- run settings -->``, the command line's alone (with their environment variables) after
``<!-- command-line settings -->``. The parsers' flags and the spec's defaults are read from it,
and ``RunSettings``' defaults are what its defaults give. ``python tests/spec/test_settings_docs.py``
rewrites the docs' tables after a change of the table."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from mpitune.cli.loading import overrides
from mpitune.cli.parsers import replay_parser, tune_parser
from mpitune.errors import SpecError
from mpitune.model.problem import RunSettings
from mpitune.spec.checker import Checker
from mpitune.spec.kernel_tuner import DEFAULTS
from mpitune.spec.settings import Overrides, run_settings, search_fields
from mpitune.spec.settings_table import CALIBRATE, MAX_FEVALS, PRIOR, SETTINGS, SPEC_DEFAULTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"
MARKER = "<!-- run settings -->"
COMMAND_LINE = "<!-- command-line settings -->"
TABLES = {
    MARKER: ["| name | meaning | default | flag |", "|---|---|---|---|"],
    COMMAND_LINE: ["| flag | environment variable | meaning |", "|---|---|---|"],
}


def expected(marker: str = MARKER) -> list[str]:
    if marker == MARKER:
        return TABLES[marker] + [setting.row() for setting in SETTINGS if setting.spec]
    return TABLES[marker] + [setting.command_line_row() for setting in SETTINGS if not setting.spec]


def table_in(text: str, marker: str = MARKER) -> list[str]:
    lines = text.splitlines()
    start = lines.index(marker) + 1
    rows = []
    for row in lines[start:]:
        if not row.startswith("|"):
            break
        rows.append(row)
    return rows


def rewritten(text: str) -> str:
    out, skipping = [], False
    for line in text.splitlines():
        if skipping and line.startswith("|"):
            continue
        skipping = False
        out.append(line)
        if line in TABLES:
            out += expected(line)
            skipping = True
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("marker", TABLES)
def test_the_docs_tables_are_the_settings_table(marker):
    assert table_in(DOC.read_text(), marker) == expected(marker), "run python tests/spec/test_settings_docs.py"


def test_a_stale_table_is_found_and_rewritten():
    text = DOC.read_text().replace("| `0.02` |", "| `0.05` |", 1).replace("`MPITUNE_LIVENESS_TIMEOUT_S`", "", 1)
    assert table_in(text) != expected() and table_in(text, COMMAND_LINE) != expected(COMMAND_LINE)
    assert table_in(rewritten(text)) == expected()
    assert table_in(rewritten(text), COMMAND_LINE) == expected(COMMAND_LINE)


def test_every_spec_setting_is_documented_once_and_known_to_the_spec():
    documented = [row.split("`")[1] for row in table_in(DOC.read_text())[2:]]
    assert documented == [s.field for s in SETTINGS if s.spec]
    assert all(DEFAULTS[name] == default for name, default in SPEC_DEFAULTS.items())


@pytest.mark.parametrize("parser", [tune_parser, replay_parser])
def test_every_flag_of_the_table_is_a_flag_of_the_run_and_of_the_replay(parser):
    given = {action.option_strings[0] for action in parser()._actions if action.option_strings}
    assert {s.flag.name for s in SETTINGS if s.flag} <= given


def test_run_settings_defaults_are_the_tables():
    made = run_settings(Checker("spec.py"), search_fields(), Overrides())
    by_default = RunSettings()
    for field in dataclasses.fields(RunSettings):
        if field.name not in ("strategy", "cache_path"):  # derived: from the budget, from the spec's name
            assert getattr(made, field.name) == getattr(by_default, field.name), field.name


def test_the_flags_become_the_overrides():
    args = tune_parser().parse_args(
        ["s.py", "--no-calibrate", "--prior", "a.h5", "--max-fevals", "3", "--no-isolation"]
    )
    given = overrides(args)
    assert {row.name: value for row, value in given.given.items()} == {
        "calibrate": False,
        "prior": ("a.h5",),
        "max_fevals": 3,
        "isolate": False,
    }
    assert (given[CALIBRATE], given[PRIOR], given[MAX_FEVALS]) == (False, ("a.h5",), 3)
    assert overrides(tune_parser().parse_args(["s.py"])).given == {}


def test_the_command_line_wins_over_the_spec_which_wins_over_the_default():
    spec = search_fields(calibrate=False, confirm=3, device_margin=0.1)
    settings = run_settings(Checker("spec.py"), spec, Overrides(confirm=0))
    assert (settings.calibrate, settings.confirm, settings.device_margin) == (False, 0, 0.1)


def test_a_bad_value_names_the_spec_s_field():
    with pytest.raises(SpecError, match="time_limit: must be a number"):
        run_settings(Checker("spec.py"), search_fields(strategy_options={"time_limit": "x"}), Overrides())
    with pytest.raises(SpecError, match="calibrate: must be True or False, got 1"):
        run_settings(Checker("spec.py"), search_fields(calibrate=1), Overrides())


def test_an_unknown_override_is_refused():
    with pytest.raises(TypeError, match="no run setting 'calibration'"):
        Overrides(calibration=False)


if __name__ == "__main__":
    DOC.write_text(rewritten(DOC.read_text()))
    sys.exit(0)
