"""The README's sample output ("What a run gives you") against a real run's, line kind by line
kind, so that a change to what a run prints fails here until the README shows it.

The sample is the quick start's matrix multiply; the real run here is a small C problem on two
ranks, so the numbers, names and paths differ and only the shapes are compared: each line kind
has one anchored regex, every line of the README's sample must be of a kind and have a real line
of the same kind, in the same order, and every progress line of the real run must be of a kind.
"""

from __future__ import annotations

import re

from conftest import REPO, mpitune, write_scale_spec

NUM = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
# The objective as Objective.describe gives it: '1.234 ms', or 'GFLOP/s 567.8 (1.234 ms)'.
OBJECTIVE = rf"(?:{NUM} ms|\S+ {NUM} \({NUM} ms\))"
CONFIG = r"\(\w+=[^,()]+(?:, \w+=[^,()]+)*\)"
KINDS = {
    "header": re.compile(
        r"mpitune: tuning \w+ \(\w+\) on \d+ rank\(s\): \d+ configurations, \d+ already in \S+, "
        r"strategy \w+, (?:batches of \d+|refilled as ranks run short \(chunks of up to \d+ a rank, dealt once "
        r"\d+ of \d+ ranks holds? fewer than \d+ orders\)"
        r"|refilled as each rank runs out \(chunks of up to \d+ a rank\)), "
        r"(?:compiling in turn|\d+ compile worker\(s\) per rank|\d+-\d+ compile workers per rank)"
    ),
    "batch": re.compile(
        rf"mpitune: batch \d+: \d+/\d+ configs, best (?:none yet|{OBJECTIVE} {CONFIG}), "
        rf"{NUM} configs/s, {NUM} s"
    ),
    "confirmed": re.compile(
        rf"mpitune: confirmed best {NUM} ms \[{NUM}, {NUM}\] {CONFIG}, "
        rf"(?:no ties|tied with \d+: {CONFIG}(?:, {CONFIG})*"
        r"(?: and \d+ more \(python -m mpitune report lists them\))?) "
        r"\(\d+ candidates x \d+ rounds on \d+ rank\(s\)\)"
    ),
    "best": re.compile(rf"mpitune: best: {OBJECTIVE} {CONFIG}"),
    "final": re.compile(rf"mpitune: \d+ configurations measured in {NUM} s \(\w+\); results in \S+"),
}
# The README's mark for lines left out of the sample.
ELIDED = "..."


def kind(line: str) -> str | None:
    found = [name for name, regex in KINDS.items() if regex.fullmatch(line)]
    assert len(found) <= 1, f"{line!r} is of several kinds: {found}"
    return found[0] if found else None


def collapsed(kinds: list[str]) -> list[str]:
    """The order of the kinds, a run of one kind (batch after batch) counted once."""
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


def readme_sample() -> list[str]:
    """The indented block that follows the heading 'What a run gives you'."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## What a run gives you\n", 1)[1].split("\n## ", 1)[0]
    block: list[str] = []
    for line in section.splitlines():
        if line.startswith("    "):
            block.append(line[4:])
        elif block:
            break
    assert block, "README.md: no sample output under 'What a run gives you'"
    return block


def test_readme_sample_lines_are_of_the_kinds_a_real_run_prints(tmp_path):
    sample = readme_sample()
    unknown = [line for line in sample if line != ELIDED and kind(line) is None]
    assert not unknown, f"README.md sample lines of no known kind (update KINDS here if the output changed): {unknown}"

    spec = write_scale_spec(tmp_path)
    proc = mpitune(2, [str(spec), "--cache", str(tmp_path / "out.h5")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    real = [line for line in proc.stdout.splitlines() if line.startswith("mpitune: ")]
    strange = [line for line in real if kind(line) is None]
    assert not strange, f"a real run prints lines of a shape the README and KINDS here do not know: {strange}"

    real_kinds = [kind(line) for line in real]
    for line in sample:
        if line != ELIDED:
            assert kind(line) in real_kinds, f"README.md: {line!r} has no counterpart in a real run:\n{proc.stdout}"
    sample_kinds = [kind(line) for line in sample if line != ELIDED]
    assert collapsed(sample_kinds) == collapsed(real_kinds), (sample, real)
