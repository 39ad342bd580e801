"""docs/cache-format.md's tables of columns are the schema's: each follows a line
``<!-- columns: NAME -->`` and is rendered from ``mpitune/model/schema.py``, so that a column is
documented where it is declared. ``python tests/model/test_schema_docs.py`` rewrites the tables
after a change of the schema."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mpitune.model.result import Status
from mpitune.model.schema import CONFIG_ID, RESULT_COLUMNS, RUN_COLUMNS, TABLES, TIMELINE_COLUMNS, markdown_rows
from mpitune.model.timeline import RECORDED_PHASES
from mpitune.scheduling.messages import StopReason

DOC = Path(__file__).resolve().parents[2] / "docs" / "cache-format.md"
HEADER = ["| field | type | meaning |", "|---|---|---|"]
PARAMETERS = "| one field per tunable parameter | int64, float64 or text | the configuration's values |"
MARKER = re.compile(r"^<!-- columns: (\w+) -->$")


def expected() -> dict[str, list[str]]:
    """Every dataset's table as the schema declares it."""
    tables = {name: HEADER + markdown_rows(columns) for name, columns in TABLES.items()}
    tables["results"] = HEADER + markdown_rows([CONFIG_ID]) + [PARAMETERS] + markdown_rows(RESULT_COLUMNS)
    return tables


def tables_in(text: str) -> dict[str, list[str]]:
    """The table after each marker, by the dataset the marker names."""
    lines, found = text.splitlines(), {}
    for i, line in enumerate(lines):
        marker = MARKER.match(line)
        if marker:
            rows = []
            for row in lines[i + 1 :]:
                if not row.startswith("|"):
                    break
                rows.append(row)
            assert marker.group(1) not in found, f"two tables of {marker.group(1)}"
            found[marker.group(1)] = rows
    return found


def rewritten(text: str) -> str:
    """``text`` with every marked table replaced by the schema's."""
    tables, out, skipping = expected(), [], False
    for line in text.splitlines():
        if skipping and line.startswith("|"):
            continue
        skipping = False
        out.append(line)
        marker = MARKER.match(line)
        if marker:
            out += tables[marker.group(1)]
            skipping = True
    return "\n".join(out) + "\n"


def test_every_dataset_has_its_table_in_the_docs_as_the_schema_declares_it():
    documented = tables_in(DOC.read_text())
    assert sorted(documented) == sorted(expected()), "a dataset without a marked table, or a table of none"
    for name, rows in expected().items():
        assert documented[name] == rows, f"{name}: run python tests/model/test_schema_docs.py"


def test_the_docs_are_what_the_rewrite_gives():
    text = DOC.read_text()
    assert rewritten(text) == text


def test_the_meanings_name_every_status_phase_and_ending():
    def doc(columns, name):
        return next(c.doc for c in columns if c.name == name)

    assert all(f"`{s.value}`" in doc(RESULT_COLUMNS, "status") for s in Status)
    assert all(f"`{p}`" in doc(TIMELINE_COLUMNS, "phase") for p in RECORDED_PHASES)
    assert all(f"`{r.value}`" in doc(RUN_COLUMNS, "status") for r in StopReason)


def test_a_stale_table_is_found():
    text = DOC.read_text().replace("| `launches` | int32 |", "| `launches` | int64 |", 1)
    assert tables_in(text)["results"] != expected()["results"]
    assert tables_in(rewritten(text))["results"] == expected()["results"]


if __name__ == "__main__":
    DOC.write_text(rewritten(DOC.read_text()))
    sys.exit(0)
