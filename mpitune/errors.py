"""Errors a user can act on (the exit codes are in exits.py). Everything else is a bug and keeps
its traceback."""


class UserError(Exception):
    """A problem in what the user gave us; reported as one line, ``ExitCode.USER_ERROR``."""


class SpecError(UserError):
    """A spec file that cannot be tuned, with the file and the field to blame."""

    def __init__(self, spec_path: str, field: str, message: str):
        self.spec_path = spec_path
        self.field = field
        super().__init__(f"{spec_path}: {field}: {message}")


class CacheMismatchError(UserError):
    """The cache file belongs to a different tuning problem."""
