"""The exit codes of mpitune, in one table.

Every command, every rank of a job and the ``job`` verb that requeues read them from here.
docs/reliability.md shows the table, and a test holds the two together.

The values are the ones a shell or a batch system already reads. Input the user can fix exits
2, as with argparse and most Unix tools. A write the system refused exits ``EX_IOERR`` of
sysexits.h. A stop that a rerun continues exits ``EX_TEMPFAIL``, "try again later". An interrupt
and a closed pipe exit 128 + the signal's number. That is how a shell reports a process the
signal ended.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """An exit code and what it means to whoever reads it (a person, a script, Slurm)."""

    _value_: int
    meaning: str

    def __new__(cls, value: int, meaning: str) -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    OK = 0, "done: the search finished or spent its budget; an offline verb did what it was asked"
    FAILED = 1, "a rank crashed or hit a bug (traceback in its log); check: a repair is due; watch: the run was killed"
    USER_ERROR = 2, "input the user can fix (spec, flags, another problem's or a damaged file); one line says what"
    CANNOT_WRITE = (
        74,
        "EX_IOERR: the system refused a write (full, read-only, no permission) or the results file was lost "
        "under the run; the rows before are kept",
    )
    RESUMABLE = 75, "EX_TEMPFAIL: stopped early (signal, time limit, lost device, silent rank); a rerun resumes"
    INTERRUPTED = 130, "128 + SIGINT: a second Ctrl-C, or one in start-up or the last write; what was recorded is kept"
    CLOSED_PIPE = 141, "128 + SIGPIPE: the reader of an offline verb's output went away (a report piped into head)"
