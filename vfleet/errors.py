"""Errors that the CLI reports as one clear message and a non-zero exit, never a traceback."""


class VfleetError(Exception):
    """A problem the user can fix: the message names the thing and the fix."""

    exit_code = 2


class ProfileError(VfleetError):
    """A serve profile is malformed or breaks a rule."""


class SelectError(VfleetError):
    """No profile fits the detected host."""
