"""Errors a user can act on, and the exit codes every rank ends with. Everything else is a
bug and keeps its traceback."""

EXIT_USER_ERROR = 2
# A run that stopped before its search was done (signal, time limit, lost device) and that a
# rerun continues; 75 is EX_TEMPFAIL, "try again later".
EXIT_RESUMABLE = 75


class UserError(Exception):
    """A problem in what the user gave us; reported as one line, exit code 2."""


class SpecError(UserError):
    """A spec file that cannot be tuned, with the file and the field to blame."""

    def __init__(self, spec_path: str, field: str, message: str):
        self.spec_path = spec_path
        self.field = field
        super().__init__(f"{spec_path}: {field}: {message}")


class CacheMismatchError(UserError):
    """The cache file belongs to a different tuning problem."""
